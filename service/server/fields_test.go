package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
)

// refusingRunner answers every spec with a field error of the runtime's
// own path, as Host.Run does for a bind it cannot find.
type refusingRunner struct{ field string }

func (r refusingRunner) Run(context.Context, *api.Spec, isolate.IO) (*api.Report, error) {
	return nil, &api.FieldError{Field: r.field, Msg: "/nonexistent: no such file or directory"}
}

func (refusingRunner) Ready() int { return 0 }

// A runtime error about a field names it by the request's own path: the
// command it belongs to, not the runtime's spec alone.
func TestRuntimeFieldErrorsNameTheCommand(t *testing.T) {
	for _, field := range []string{"binds[0].host", "image", "seccomp", "copy_in[1].from"} {
		srv := New(Config{Runner: refusingRunner{field}, Version: "test", Parallel: 2})
		sock := t.TempDir() + "/api.sock"
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(l) }()
		resp, err := unixClient(sock).Post("http://isolate/v1/run", "application/json",
			strings.NewReader(`{"commands":[{"args":["/bin/true"]},{"args":["/bin/true"]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		var body errorBody
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || (body.Field != "commands[0]."+field && body.Field != "commands[1]."+field) ||
			strings.Contains(body.Error, "--") {
			t.Errorf("%s: %d %+v, want 400 naming commands[i].%s in the API's words", field, resp.StatusCode, body, field)
		}
		srv.Shutdown(time.Second)
		<-done
	}
}

// The same through the real runtime: a bind the host lacks, an image it
// has not built, a profile that is not there.
func TestHostFieldErrorsNameTheCommand(t *testing.T) {
	needRoot(t)
	s := startService(t, nil)
	for body, want := range map[string]string{
		`{"commands":[{"args":["/bin/true"],"binds":[{"host":"/nonexistent","box":"/x"}]}]}`: "commands[0].binds[0].host",
		`{"commands":[{"args":["/bin/true"]},{"args":["/bin/true"],"image":"nosuchimage"}]}`: "commands[1].image",
		`{"commands":[{"args":["/bin/true"],"seccomp":"/nonexistent.json"}]}`:                "commands[0].seccomp",
	} {
		code, out := s.do(t, "POST", "/v1/run", body)
		var e errorBody
		json.Unmarshal(out, &e)
		if code != http.StatusBadRequest || e.Field != want || strings.Contains(e.Error, "--") {
			t.Errorf("%s: %d %s, want 400 naming %s in the API's words", body, code, out, want)
		}
	}
}

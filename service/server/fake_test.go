package server

// The service's own logic over a fake runner, without root: decoding,
// streams in and out, pipes between commands and their recording, files
// copied in and out (inline and through the store), the streamed answer.
// The fake runs a few words of a command language on the host, with the
// runtime's rules for IO and copies; the real runtime's tests are
// run_test.go's.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/service/filestore"
)

// scriptRunner runs a command as a word of its own language:
//
//	echo WORDS...     WORDS and a newline on stdout
//	warn WORDS...     the same on stderr
//	cat               stdin to stdout
//	cat BOXPATH       a file copied in as data to stdout
//	write BOXPATH T   T as the box file BOXPATH, to the copy-out of it
//	exit N            exit status N (RE)
type scriptRunner struct{}

func (scriptRunner) Ready() int { return 0 }

func (scriptRunner) Run(ctx context.Context, spec *api.Spec, stdio isolate.IO) (*api.Report, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	limit := spec.WithDefaults().OutputLimitBytes
	var out, errOut strings.Builder
	write := func(w io.Writer, keep *strings.Builder, s string) {
		if w != nil {
			io.WriteString(w, s)
		}
		if _, isFile := w.(*os.File); !isFile && int64(keep.Len()+len(s)) <= limit {
			keep.WriteString(s)
		}
	}
	rep := &api.Report{Status: api.StatusOK, BlockedSyscalls: []api.Blocked{}}
	args := spec.Args
	switch {
	case args[0] == "echo":
		write(stdio.Stdout, &out, strings.Join(args[1:], " ")+"\n")
	case args[0] == "warn":
		write(stdio.Stderr, &errOut, strings.Join(args[1:], " ")+"\n")
	case args[0] == "cat" && len(args) == 1:
		if stdio.Stdin != nil {
			b, err := io.ReadAll(stdio.Stdin)
			if err != nil {
				return nil, err
			}
			write(stdio.Stdout, &out, string(b))
		}
	case args[0] == "cat":
		for _, c := range stdio.CopyIn {
			if c.To == args[1] {
				b, err := io.ReadAll(c.Content)
				if err != nil {
					return nil, err
				}
				write(stdio.Stdout, &out, string(b))
			}
		}
	case args[0] == "write":
		for _, c := range stdio.CopyOut {
			if c.From == args[1] {
				if err := sink(c, args[2]); err != nil {
					return nil, err
				}
			}
		}
	case args[0] == "exit":
		rep.Status, rep.ExitCode = api.StatusRE, 3
	default:
		return nil, fmt.Errorf("scriptRunner: no word %q", args[0])
	}
	// A command's streams end with it, as a box's do.
	for _, w := range []any{stdio.Stdout, stdio.Stderr} {
		if f, ok := w.(*os.File); ok {
			f.Close()
		}
	}
	// A copy-out of a file the command did not write fails it, as the
	// runtime's does.
	for _, c := range stdio.CopyOut {
		if len(args) < 2 || args[0] != "write" || c.From != args[1] {
			rep.Status, rep.Message = api.StatusXX, "copy out "+c.From+": no such file"
		}
	}
	rep.Stdout, rep.Stderr = out.String(), errOut.String()
	return rep, nil
}

// sink hands content to a copy-out's sink as the runtime does: an open
// regular file and its size.
func sink(c isolate.Copy, content string) error {
	f, err := os.CreateTemp("", "isolate-fake-out-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return c.Sink(f, int64(len(content)))
}

// fakeService serves scriptRunner on a unix socket of its own.
func fakeService(t *testing.T) (*http.Client, *Server) {
	t.Helper()
	dir := t.TempDir()
	store, err := filestore.Open(filepath.Join(dir, "files"), 1<<20, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{Runner: scriptRunner{}, Store: store, Version: "test", Parallel: 8})
	sock := filepath.Join(dir, "api.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	serveUntilCleanup(t, srv, l)
	return unixClient(sock), srv
}

// serveUntilCleanup serves srv on l until the test ends.
func serveUntilCleanup(t *testing.T, srv *Server, l net.Listener) {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Shutdown(time.Second)
		<-done
	})
}

func postRun(t *testing.T, c *http.Client, body string) (int, RunResponse, string) {
	t.Helper()
	resp, err := c.Post("http://isolate/v1/run", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var rr RunResponse
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &rr); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
	}
	return resp.StatusCode, rr, string(raw)
}

// Inputs and outputs: text and base64 stdin, stderr apart, a collected
// stream cut at its max_bytes, a non-zero exit.
func TestFakeStreams(t *testing.T) {
	c, _ := fakeService(t)
	code, rr, raw := postRun(t, c, `{"commands":[
		{"args":["cat"],"stdin":{"text":"from text"}},
		{"args":["cat"],"stdin":{"base64":"ZnJvbSBiYXNlNjQ="}},
		{"args":["warn","to","stderr"]},
		{"args":["echo","0123456789"],"stdout":{"collect":{"max_bytes":4}}},
		{"args":["exit"]}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	r := rr.Results
	if r[0].Stdout != "from text" || r[1].Stdout != "from base64" || r[2].Stderr != "to stderr\n" || r[2].Stdout != "" {
		t.Errorf("streams: %q %q %q", r[0].Stdout, r[1].Stdout, r[2].Stderr)
	}
	if r[3].Stdout != "0123" || !r[3].StdoutTruncated {
		t.Errorf("cut at 4: %q truncated %v", r[3].Stdout, r[3].StdoutTruncated)
	}
	if r[4].Status != api.StatusRE || r[4].Sandbox.Via != "service" {
		t.Errorf("exit: %+v", r[4].Report)
	}
}

// A pipe joins two commands, and a recorded one keeps what passed, up
// to its bound.
func TestFakePipes(t *testing.T) {
	c, _ := fakeService(t)
	code, rr, raw := postRun(t, c, `{"commands":[
		{"args":["echo","through","the","pipe"],"stdout":{"pipe":true}},
		{"args":["cat"],"stdin":{"pipe":true}}],
		"pipes":[{"from":{"cmd":0,"fd":1},"to":{"cmd":1,"fd":0},"record_max_bytes":7}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	if got := rr.Results[1].Stdout; got != "through the pipe\n" {
		t.Errorf("the reader got %q", got)
	}
	if len(rr.Pipes) != 1 || rr.Pipes[0].Data != "through" || !rr.Pipes[0].Truncated {
		t.Errorf("recording: %+v", rr.Pipes)
	}
	// A pipe from a stream its command collects is refused, naming it.
	code, _, raw = postRun(t, c, `{"commands":[{"args":["echo"],"stdout":{"collect":{}}},{"args":["cat"],"stdin":{"pipe":true}}],
		"pipes":[{"from":{"cmd":0,"fd":1},"to":{"cmd":1,"fd":0}}]}`)
	if code != 400 || !strings.Contains(raw, `"field":"`) {
		t.Errorf("pipe from a collected stream: %d %s", code, raw)
	}
}

// Files: copied in from inline text, copied out inline (cut at its
// bound) and into the store, whose id the file endpoint serves.
func TestFakeFiles(t *testing.T) {
	c, _ := fakeService(t)
	code, rr, raw := postRun(t, c, `{"commands":[
		{"args":["cat","/box/in.txt"],"copy_in":[{"path":"/box/in.txt","text":"copied in"}]},
		{"args":["write","/box/out.txt","copied out"],"copy_out":[{"path":"/box/out.txt","inline_max_bytes":6}]},
		{"args":["write","/box/kept.txt","kept in the store"],"copy_out":[{"path":"/box/kept.txt","store":true}]},
		{"args":["echo"],"copy_out":[{"path":"/box/never.txt"}]}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	r := rr.Results
	if r[0].Stdout != "copied in" {
		t.Errorf("copy in: %q", r[0].Stdout)
	}
	if co := r[1].CopyOut; len(co) != 1 || co[0].Text == nil || *co[0].Text != "copied" || !co[0].Truncated || co[0].Size != 10 {
		t.Errorf("copy out inline: %+v", co)
	}
	if co := r[3].CopyOut; len(co) != 1 || co[0].Error == "" || r[3].Status != api.StatusXX {
		t.Errorf("a file the box lacks: %+v", co)
	}
	co := r[2].CopyOut
	if len(co) != 1 || co[0].File == "" {
		t.Fatalf("copy out to the store: %+v", co)
	}
	resp, err := c.Get("http://isolate/v1/files/" + co[0].File)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "kept in the store" {
		t.Errorf("the stored file: %d %q", resp.StatusCode, b)
	}
	// A copy-in from a store id that does not exist names its field.
	code, _, raw = postRun(t, c, `{"commands":[{"args":["echo"],"copy_in":[{"path":"/box/x","file":"nosuchid"}]}]}`)
	if code != 400 || !strings.Contains(raw, `"field":"commands[0].copy_in[0].file"`) {
		t.Errorf("a missing store file: %d %s", code, raw)
	}
}

// Asked for NDJSON, the answer streams each command's output as it comes,
// then its result, then the end.
func TestFakeStreamedAnswer(t *testing.T) {
	c, _ := fakeService(t)
	req, _ := http.NewRequest("POST", "http://isolate/v1/run", strings.NewReader(`{"commands":[{"args":["echo","live"]}]}`))
	req.Header.Set("Accept", ndjson)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []Event
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		events = append(events, ev)
	}
	if len(events) != 3 || events[0].Stream != "stdout" || events[0].Data != "live\n" || events[1].Result == nil || !events[2].Done {
		t.Fatalf("events: %+v", events)
	}
	if events[1].Result.Stdout != "live\n" {
		t.Errorf("the result's stdout: %q", events[1].Result.Stdout)
	}
}

// A runtime failure that is not the request's is a 500 with its cause,
// and a field error the runner finds names the command.
func TestFakeRunnerErrors(t *testing.T) {
	c, _ := fakeService(t)
	code, _, raw := postRun(t, c, `{"commands":[{"args":["echo"]},{"args":["nosuchword"]}]}`)
	if code != 500 || !strings.Contains(raw, "nosuchword") {
		t.Errorf("runner failure: %d %s", code, raw)
	}
	code, _, raw = postRun(t, c, `{"commands":[{"args":["echo"]},{"args":["echo"],"memory_bytes":-5}]}`)
	var body errorBody
	json.Unmarshal([]byte(raw), &body)
	if code != 400 || body.Field != "commands[1].memory_bytes" {
		t.Errorf("bad limit: %d %s", code, raw)
	}
}

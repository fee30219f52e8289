package server

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// reportRunner answers every command with one report, running nothing.
type reportRunner struct{}

func (reportRunner) Run(ctx context.Context, spec *api.Spec, stdio isolate.IO) (*api.Report, error) {
	return &api.Report{Status: "OK"}, nil
}

func (reportRunner) Ready() int { return 0 }

// TestAnswerIsTheEndpoints: a queue job's answer is byte for byte what
// an HTTP client without rights (a TCP caller) gets (but for the
// request's id): the report, a 400
// naming the field, a 403 refusal, a cap.
func TestAnswerIsTheEndpoints(t *testing.T) {
	s := New(Config{Runner: reportRunner{}, Version: "test", Parallel: 2,
		Policy: caller.Policy{Caps: caller.Caps{MemoryBytes: 64 << 20}}})
	for _, body := range []string{
		`{"commands":[{"args":["/bin/true"]}]}`,
		`{"commands":[{"args":["/bin/true"],"memroy_bytes":1}]}`,
		`{"commands":[{"args":["/bin/true"],"net":"host"}]}`,
		`{"commands":[{"args":["/bin/true"],"memory_bytes":1073741824}]}`,
		`{"commands":[{"args":["/bin/true"],"binds":[{"host":"/etc","box":"/mnt"}]}]}`,
		`not json`,
	} {
		code, answer := s.Answer(context.Background(), caller.QueueJob, "POST", "/v1/run", body)
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/run", strings.NewReader(body)))
		// Each request has an id of its own.
		ids := regexp.MustCompile(`"request_id":"[0-9a-f]{24}"`)
		answer = ids.ReplaceAll(answer, []byte(`"request_id":""`))
		if got := ids.ReplaceAll(w.Body.Bytes(), []byte(`"request_id":""`)); code != w.Code || !bytes.Equal(answer, got) {
			t.Errorf("%s: queue %d %s, HTTP %d %s", body, code, answer, w.Code, w.Body.Bytes())
		}
		if strings.Contains(body, `"/bin/true"]}]}`) && code != http.StatusOK {
			t.Errorf("%s: %d %s", body, code, answer)
		}
		if strings.Contains(body, "net") && code != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", body, code, answer)
		}
	}
}

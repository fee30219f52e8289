package server

import (
	"bytes"
	"context"
	"net/http"
	"strings"

	"github.com/isolate-sandbox/isolate/service/caller"
)

// Answer sends one request through the service's own handlers in this
// process, as who, and returns what the endpoint answered: its status
// and body, byte for byte what an HTTP client would get (errors, 400s
// and 403s included), under the same policy, caps, run slots and drain.
// A front end outside HTTP (the queue) takes its answers from here. The
// token is not asked: the front end vouches for its transport.
//
// The body is read from the string itself, not a copy of it: a queue
// job's body past --max-body is refused (413) without one.
func (s *Server) Answer(ctx context.Context, who caller.Caller, method, path string, body string) (status int, answer []byte) {
	r, err := http.NewRequestWithContext(context.WithValue(ctx, callerKey{}, who), method, path, strings.NewReader(body))
	if err != nil {
		return http.StatusBadRequest, nil
	}
	w := &answerRecorder{header: http.Header{}}
	s.mux.ServeHTTP(w, r)
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.code, w.body.Bytes()
}

// answerRecorder is the response writer of Answer: it keeps the status
// and the body.
type answerRecorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (w *answerRecorder) Header() http.Header { return w.header }

func (w *answerRecorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *answerRecorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.body.Write(b)
}

// Flush is a no-op: the answer is read whole once the handler returns.
func (w *answerRecorder) Flush() {}

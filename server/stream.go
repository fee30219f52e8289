package server

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/isolate-sandbox/isolate/api"
)

// ndjson is the media type of a streamed answer: one JSON object a line.
const ndjson = "application/x-ndjson"

func wantsStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == ndjson {
			return true
		}
	}
	return false
}

// Event is one line of a streamed answer, in this order: output chunks
// of any command as they happen ({"cmd", "stream", "data"}), each
// command's result when it ends ({"cmd", "result"}), then one last line
// with the recorded pipes ({"done": true, "pipes"}) or the error that
// ended the request ({"error"}).
type Event struct {
	Cmd    *int            `json:"cmd,omitempty"`
	Stream string          `json:"stream,omitempty"` // stdout or stderr
	Data   string          `json:"data,omitempty"`
	Result *Result         `json:"result,omitempty"`
	Exec   *api.ExecReport `json:"exec,omitempty"` // /v1/exec's report
	Done   bool            `json:"done,omitempty"`
	Pipes  []PipeRecording `json:"pipes,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// events writes a streamed answer; commands' copiers write concurrently,
// one whole line at a time, each flushed at once.
type events struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	stop    context.CancelCauseFunc
	begun   bool
	err     error // the client went away: stop writing
}

// stream is the streamed answer of a request that asks for one (else
// nil), with ctx, which ends the run when the client stops reading it;
// end releases ctx.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, r *http.Request) (_ context.Context, ev *events, end context.CancelCauseFunc) {
	return s.streamIf(ctx, w, wantsStream(r))
}

// streamIf is stream for a request that says whether it wants one.
func (s *Server) streamIf(ctx context.Context, w http.ResponseWriter, want bool) (_ context.Context, ev *events, end context.CancelCauseFunc) {
	if !want {
		return ctx, nil, func(error) {}
	}
	ctx, end = context.WithCancelCause(ctx)
	return ctx, newEvents(w, s.cfg.WriteTimeout, end), end
}

// newEvents writes events to w, each within timeout: a client that
// reads nothing for that long is gone, and stop ends the run (its boxes
// are killed and its slots freed, rather than its output waiting for
// the client).
func newEvents(w http.ResponseWriter, timeout time.Duration, stop context.CancelCauseFunc) *events {
	return &events{w: w, rc: http.NewResponseController(w), timeout: timeout, stop: stop}
}

func (e *events) emit(ev Event) { e.emitValue(ev) }

// emitValue writes v as the answer's next line.
func (e *events) emitValue(v any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return
	}
	if !e.begun {
		e.w.Header().Set("Content-Type", ndjson)
		e.w.Header().Set("X-Content-Type-Options", "nosniff")
		e.w.WriteHeader(http.StatusOK)
		e.begun = true
	}
	e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
	a, err := encodeAnswer(v)
	if err == nil {
		err = a.Write(e.w)
	}
	if err == nil {
		err = e.rc.Flush()
	}
	if e.err = err; err != nil {
		e.stop(fmt.Errorf("the client stopped reading its answer (write timeout %v): %w", e.timeout, err))
	}
}

func (e *events) started() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.begun
}

// writer is an io.Writer whose writes become output events of cmd.
func (e *events) writer(cmd int, stream string) *streamWriter {
	return &streamWriter{e: e, cmd: cmd, stream: stream}
}

func (e *events) result(cmd int, r Result) { e.emit(Event{Cmd: &cmd, Result: &r}) }

func (e *events) finish(resp *RunResponse) { e.emit(Event{Done: true, Pipes: resp.Pipes}) }

func (e *events) fail(err error) { e.emit(Event{Error: err.Error()}) }

type streamWriter struct {
	e      *events
	cmd    int
	stream string
}

// Write sends p as one event. Chunks are the pipe reads of the runner's
// copier, so a line may arrive in pieces; data that is not UTF-8 is
// replaced as encoding/json does.
func (w *streamWriter) Write(p []byte) (int, error) {
	cmd := w.cmd
	w.e.emit(Event{Cmd: &cmd, Stream: w.stream, Data: string(p)})
	return len(p), nil
}

// TypedEvent is one line of a session's streamed answer: output as it
// happens ({"type": "stdout"|"stderr", "data"}), then the command's
// report ({"type": "report", ...}), the code's execution ({"type":
// "execution", ...}) or the error that ended it ({"type": "error",
// "error"}).
type TypedEvent struct {
	Type  string `json:"type"`
	Data  string `json:"data,omitempty"`
	Error string `json:"error,omitempty"`
}

// typedWriter is an io.Writer whose writes become {"type", "data"}
// lines.
type typedWriter struct {
	e   *events
	typ string
}

func (w typedWriter) Write(p []byte) (int, error) {
	w.e.emitValue(TypedEvent{Type: w.typ, Data: string(p)})
	return len(p), nil
}

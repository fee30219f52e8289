package server

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/internal/jsonout"
	"github.com/isolate-sandbox/isolate/service/caller"
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
	// Cut says the live copy of the stream stopped here (the client
	// read slower than the program wrote, beyond what the service holds
	// for its caller): the rest is in the result, as captured.
	Cut bool `json:"cut,omitempty"`
}

// events writes a streamed answer. Lines are spooled and written by a
// writer of their own, each within the write timeout: a client that
// reads slowly or not at all holds no run slot once its run is done.
// Output chunks in the spool are held in the ledger for the caller's
// account (--max-held-bytes-per-caller); beyond it the program waits for
// its client while the client reads on, and once the client has read
// nothing for liveStall the live copy of that stream is cut ({"cut":
// true} says so), the output then only in the result, as captured: a
// stalled client never keeps a run waiting. Results and the last line
// are always spooled: what they hold is the run's own output, already
// held for the caller while the answer is sent.
type events struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	stop    context.CancelCauseFunc
	ledger  *caller.Ledger
	account string

	mu      sync.Mutex
	idle    sync.Cond // the writer stopped: the spool is empty or the client gone
	begun   bool      // a line was spooled: the answer is a stream
	sent    bool      // the header is written
	writing bool
	spool   []spooled
	cut     map[string]bool // live copies cut, by "cmd stream"
	err     error           // the client went away: stop writing
	// progressed is closed when the writer wrote a line while a live
	// chunk waited for room (waiting > 0), and replaced.
	progressed chan struct{}
	waiting    int
}

// liveStall is how long a live chunk waits for room in its caller's
// budget, the client reading nothing meanwhile, before its stream's live
// copy is cut.
const liveStall = time.Second

// spooled is a line waiting for the writer, and what it holds.
type spooled struct {
	line *jsonout.Encoded
	hold *caller.Hold
}

// stream is the streamed answer of a request that asks for one (else
// nil), with ctx, which ends the run when the client stops reading it;
// end waits until what was spooled is written (or the client is gone)
// and releases ctx.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, r *http.Request) (_ context.Context, ev *events, end func()) {
	return s.streamIf(ctx, w, r, wantsStream(r))
}

// streamIf is stream for a request that says whether it wants one.
func (s *Server) streamIf(ctx context.Context, w http.ResponseWriter, r *http.Request, want bool) (_ context.Context, ev *events, end func()) {
	if !want {
		return ctx, nil, func() {}
	}
	ctx, stop := context.WithCancelCause(ctx)
	ev = newEvents(w, s.cfg.WriteTimeout, stop)
	ev.ledger, ev.account = s.ledger, callerOf(r).Account()
	return ctx, ev, func() { ev.wait(); stop(nil) }
}

// newEvents writes events to w, each within timeout: a client that
// reads nothing for that long is gone, and stop ends the run (its boxes
// are killed and its slots freed, rather than its output waiting for
// the client).
func newEvents(w http.ResponseWriter, timeout time.Duration, stop context.CancelCauseFunc) *events {
	e := &events{w: w, rc: http.NewResponseController(w), timeout: timeout, stop: stop, progressed: make(chan struct{})}
	e.idle.L = &e.mu
	return e
}

func (e *events) emit(ev Event) { e.emitValue(ev) }

// emitValue spools v as the answer's next line.
func (e *events) emitValue(v any) { e.spoolLine(v, false) }

// spoolLine spools v; a live output chunk (live) is held in the ledger
// first, at what its line holds, and refused (false) beyond the caller's
// budget.
func (e *events) spoolLine(v any, live bool) bool {
	a, err := encodeAnswer(v)
	return e.spoolEncoded(a, err, live)
}

// spoolEncoded is spoolLine for a line encoded (err: it could not be).
func (e *events) spoolEncoded(a *jsonout.Encoded, err error, live bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return false
	}
	if err != nil {
		e.err = err
		e.stop(err)
		return false
	}
	var hold *caller.Hold
	if live {
		// (A chunk of NUL bytes is six times its size as JSON.)
		if hold, err = e.ledger.Hold(e.account, caller.Usage{Bytes: a.Held()}); err != nil {
			return false
		}
	}
	e.begun = true
	e.spool = append(e.spool, spooled{line: a, hold: hold})
	if !e.writing {
		e.writing = true
		go e.write()
	}
	return true
}

// write writes the spool's lines in order until it is empty or the
// client is gone.
func (e *events) write() {
	for {
		e.mu.Lock()
		if len(e.spool) == 0 || e.err != nil {
			for _, l := range e.spool {
				l.hold.Release()
			}
			e.spool = nil
			e.writing = false
			e.idle.Broadcast()
			e.mu.Unlock()
			return
		}
		l := e.spool[0]
		e.spool[0] = spooled{}
		e.spool = e.spool[1:]
		first := !e.sent
		e.sent = true
		e.mu.Unlock()
		if first {
			e.w.Header().Set("Content-Type", ndjson)
			e.w.Header().Set("X-Content-Type-Options", "nosniff")
			e.w.WriteHeader(http.StatusOK)
		}
		e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
		err := l.line.Write(e.w)
		if err == nil {
			err = e.rc.Flush()
		}
		l.hold.Release()
		e.mu.Lock()
		if e.waiting > 0 {
			close(e.progressed)
			e.progressed = make(chan struct{})
		}
		e.mu.Unlock()
		if err != nil {
			e.mu.Lock()
			e.err = err
			e.mu.Unlock()
			e.stop(fmt.Errorf("the client stopped reading its answer (write timeout %v): %w", e.timeout, err))
		}
	}
}

// wait waits until the writer has written every spooled line, or the
// client is gone.
func (e *events) wait() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.writing {
		e.idle.Wait()
	}
}

func (e *events) started() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.begun
}

// live spools an output chunk of a stream (key names it for the cut
// notice): false when its live copy is cut, then or before.
func (e *events) live(key string, v any, cutNotice any) bool {
	e.mu.Lock()
	cut := e.cut[key]
	e.mu.Unlock()
	if cut {
		return false
	}
	a, err := encodeAnswer(v)
	for {
		e.mu.Lock()
		progressed := e.progressed
		e.waiting++
		e.mu.Unlock()
		ok := e.spoolEncoded(a, err, true)
		if !ok {
			select {
			case <-progressed: // the client read a line: room again?
			case <-time.After(liveStall):
			}
		}
		e.mu.Lock()
		e.waiting--
		gone := e.err != nil
		e.mu.Unlock()
		if ok {
			return true
		}
		if gone {
			return false
		}
		select {
		case <-progressed:
			continue
		default:
		}
		break
	}
	e.mu.Lock()
	if e.cut == nil {
		e.cut = map[string]bool{}
	}
	e.cut[key] = true
	e.mu.Unlock()
	e.emitValue(cutNotice)
	return false
}

// errLiveCut stops a live copy whose client reads slower than its
// program writes, beyond the bytes the service holds for its caller.
var errLiveCut = errors.New("the live copy was cut: the client reads slower than the program writes, beyond the bytes the service holds for its caller (--max-held-bytes-per-caller)")

// writer is an io.Writer whose writes become output events of cmd.
func (e *events) writer(cmd int, stream string) *streamWriter {
	return &streamWriter{e: e, cmd: cmd, stream: stream, key: fmt.Sprint(cmd, stream)}
}

func (e *events) result(cmd int, r Result) { e.emit(Event{Cmd: &cmd, Result: &r}) }

func (e *events) finish(resp *RunResponse) { e.emit(Event{Done: true, Pipes: resp.Pipes}) }

func (e *events) fail(err error) { e.emit(Event{Error: err.Error()}) }

type streamWriter struct {
	e      *events
	cmd    int
	stream string
	key    string // of its cut
}

// Write sends p as one event. Chunks are the pipe reads of the runner's
// copier, so a line may arrive in pieces; data that is not UTF-8 is
// replaced as encoding/json does. Past its cut it fails: the runner's
// copier stops the live copy and goes on capturing.
func (w *streamWriter) Write(p []byte) (int, error) {
	cmd := w.cmd
	if !w.e.live(w.key, Event{Cmd: &cmd, Stream: w.stream, Data: string(p)}, Event{Cmd: &cmd, Stream: w.stream, Cut: true}) {
		return 0, errLiveCut
	}
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
	Cut   bool   `json:"cut,omitempty"` // as Event's
}

// typedWriter is an io.Writer whose writes become {"type", "data"}
// lines.
type typedWriter struct {
	e   *events
	typ string
}

func (w typedWriter) Write(p []byte) (int, error) {
	if !w.e.live(w.typ, TypedEvent{Type: w.typ, Data: string(p)}, TypedEvent{Type: w.typ, Cut: true}) {
		return 0, errLiveCut
	}
	return len(p), nil
}

package codecontext

// Code contexts: a persistent interpreter in a session, the way a notebook
// kernel is one. Each context is a driver process (codedriver/: python.py,
// javascript.js, bash.sh)
// that executes the code it is sent in one namespace that lives as long as
// the process; a context that dies is started afresh on its next call.

import (
	"bufio"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/isolate-sandbox/isolate/internal/headtail"

	"github.com/isolate-sandbox/isolate/api"
)

//go:embed codedriver/python.py
var pythonDriver string

//go:embed codedriver/javascript.js
var javascriptDriver string

//go:embed codedriver/bash.sh
var bashDriver string

// CodeLanguages are the languages a code context runs: python (python3 in
// the session's image), javascript (node) and bash.
var CodeLanguages = []string{"python", "javascript", "bash"}

// codeLanguageAliases are other names of CodeLanguages.
// (The python-data image's interpreter is Python's: its names name python.)
var codeLanguageAliases = map[string]string{
	"python3": "python", "py": "python", "python-data": "python", "pydata": "python",
	"js": "javascript", "node": "javascript", "nodejs": "javascript",
	"sh": "bash", "shell": "bash",
}

// CodeLanguage is the language of code contexts name stands for (one of
// CodeLanguages or an alias of one), or a FieldError naming "language".
func CodeLanguage(name string) (string, error) {
	if name == "" {
		return "python", nil
	}
	if l, ok := codeLanguageAliases[name]; ok {
		return l, nil
	}
	for _, l := range CodeLanguages {
		if l == name {
			return l, nil
		}
	}
	return "", &api.FieldError{Field: "language", Msg: fmt.Sprintf("%q is not a language of code contexts (%s)", name, strings.Join(CodeLanguages, ", "))}
}

// driverArgs is the command line of a driver of language, and the program
// it needs in the session's image.
func driverArgs(language string) ([]string, string) {
	switch language {
	case "javascript":
		// The frames on fd 3; what the driver's children write to fds 1
		// and 2 goes to its stderr, never among the frames.
		return []string{"sh", "-c", `exec node --expose-internals -e "$0" 3>&1 1>&2`, javascriptDriver}, "node"
	case "bash":
		return []string{"bash", "--noprofile", "--norc", "-c", bashDriver}, "bash"
	}
	return []string{"python3", "-c", pythonDriver}, "python3"
}

// ErrorContextDied is the Name of an Execution's error when the context's
// process died during the call (a crash, os._exit, an OOM kill, a signal).
const ErrorContextDied = "ContextDied"

// interruptGrace is how long code gets to stop after the interrupt at its
// call's end before its context is killed.
const interruptGrace = time.Second

// interruptResend is how often the interrupt is sent again until the
// driver says it took it.
const interruptResend = 50 * time.Millisecond

// frameWaitDelay is how long frames are read after the driver ended.
const frameWaitDelay = 200 * time.Millisecond

// maxCodeBytes bounds a request's code.
const maxCodeBytes = 16 << 20

// maxTextBytes bounds a result's repr or an error frame kept from the
// driver; the rest is read and dropped.
const maxTextBytes = 1 << 20

// maxRichBytes bounds one rich result (its JSON, images in base64); one
// over it is dropped.
const maxRichBytes = 8 << 20

// maxResultsBytes bounds a call's rich results together; those beyond it
// are dropped.
const maxResultsBytes = 64 << 20

// startTimeout bounds how long NewCodeContext waits for the interpreter.
const startTimeout = 60 * time.Second

// Execution is what one call of a code context produced.
type Execution struct {
	// Result is the repr of the value of the code's last expression
	// statement (as a notebook shows it), nil when there is none or it is
	// None.
	Result *string `json:"result"`
	// Results are the call's rich results (Python): what display() showed
	// and the last expression's value (IsMainResult), in every format the
	// object offers, then the matplotlib figures left open, as PNG.
	Results []Result `json:"results,omitempty"`
	Stdout  string   `json:"stdout"`
	Stderr  string   `json:"stderr"`
	// Truncated: more output came than the output limit; Stdout or Stderr
	// keeps its first and its last half, the cut marked (headtail.CutMarker).
	Truncated bool `json:"truncated"`
	// Error is the exception the code raised, or why the context died.
	Error *ExecError `json:"error"`
	// ExecutionCount numbers the calls of the context, from 1.
	ExecutionCount int `json:"execution_count"`
	// Restarted: the context had died, and this call ran in a fresh one.
	Restarted bool `json:"restarted"`
}

// Result is an object as a notebook shows it, in the formats it offers
// (IPython's _repr_*_ methods): Text is its repr; PNG and JPEG are base64.
type Result struct {
	Text         string          `json:"text,omitempty"`
	HTML         string          `json:"html,omitempty"`
	Markdown     string          `json:"markdown,omitempty"`
	SVG          string          `json:"svg,omitempty"`
	PNG          string          `json:"png,omitempty"`
	JPEG         string          `json:"jpeg,omitempty"`
	LaTeX        string          `json:"latex,omitempty"`
	JSON         json.RawMessage `json:"json,omitempty"`
	IsMainResult bool            `json:"is_main_result,omitempty"`
}

type resultHandlerKey struct{}

// WithResultHandler is ctx carrying on to the CodeContext.Run it is
// given: on gets each rich result as it arrives.
func WithResultHandler(ctx context.Context, on func(Result)) context.Context {
	return context.WithValue(ctx, resultHandlerKey{}, on)
}

// ExecError is an exception raised by the code: its type's name, its
// message, and the traceback as the language prints it (the driver's own
// frames left out).
type ExecError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// codeProcess is a running driver: a session's *Process, or (in tests) a
// plain process behind the same two methods.
type Process interface {
	Signal(syscall.Signal) error
	Wait() *api.Report
}

// codeStarter starts a driver with args and the given stdin and stdout
// (given to it as they are: it closes neither).
type codeStarter func(args []string, stdin, stdout *os.File) (Process, error)

// CodeContext is a persistent interpreter in a session. Its calls run one
// at a time.
type CodeContext struct {
	language    string
	start       codeStarter
	outputLimit int64
	ended       <-chan struct{} // closed when what runs the contexts ends (the session)

	call sync.Mutex // held by a call: one at a time

	mu     sync.Mutex // guards what follows; Close takes it, not call
	drv    *driver    // nil: none running (not yet, or it died)
	died   bool       // a driver has died since the last call
	closed bool
}

// ErrContextClosed is a call's error when its context was closed before
// or while it ran.
var ErrContextClosed = errors.New("the code context is closed")

// driver is one process of a context.
type driver struct {
	proc     Process
	stdin    *os.File      // the requests' pipe
	frames   chan frame    // closed at the end of its output
	quit     chan struct{} // closed when the frames are no one's any more
	quitOnce sync.Once
	done     chan struct{} // closed once the process has ended
	report   *api.Report   // once done
	outBytes int64         // bound of an output frame (Bash sends a call's output in one or two)
}

type frame struct {
	kind    byte
	payload []byte
	cut     bool
}

func New(language string, outputLimit int64, ended <-chan struct{}, start codeStarter) (*CodeContext, error) {
	language, err := CodeLanguage(language)
	if err != nil {
		return nil, err
	}
	if outputLimit <= 0 {
		outputLimit = api.DefaultOutputLimitBytes
	}
	c := &CodeContext{language: language, start: start, outputLimit: outputLimit, ended: ended}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.startDriver(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Language is the context's language.
func (c *CodeContext) Language() string { return c.language }

// startDriver starts a driver and waits for it to be ready.
func (c *CodeContext) startDriver(ctx context.Context) error {
	// Both pipes are files, handed to the driver as they are: no copier
	// stands between it and the context, and the end of its process is the
	// end of its frames.
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return err
	}
	args, program := driverArgs(c.language)
	proc, err := c.start(args, inR, outW)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return err
	}
	d := &driver{proc: proc, stdin: inW, frames: make(chan frame), quit: make(chan struct{}), done: make(chan struct{}),
		outBytes: max(maxTextBytes, c.outputLimit)}
	go func() {
		d.report = proc.Wait()
		close(d.done)
		// A process the code forked may hold the frames' pipe: what the
		// driver wrote last is read, then no more.
		_ = outR.SetReadDeadline(time.Now().Add(frameWaitDelay))
	}()
	go d.readFrames(outR)
	select {
	case f, ok := <-d.frames:
		if ok && f.kind == 'k' {
			c.mu.Lock()
			closed := c.closed
			if !closed {
				c.drv = d
			}
			c.mu.Unlock()
			if closed {
				d.kill()
				return ErrContextClosed
			}
			return nil
		}
		d.kill()
		return fmt.Errorf("%s in the session did not start: %s", program, d.why())
	case <-ctx.Done():
		d.kill()
		return fmt.Errorf("%s in the session did not start: %w", program, context.Cause(ctx))
	case <-c.ended:
		d.kill()
		return api.ErrSessionEnded
	}
}

// readFrames reads the driver's frames until its output ends. A payload
// over maxTextBytes (an output frame: over the output limit) is cut (the
// rest read and dropped).
func (d *driver) readFrames(r *os.File) {
	defer close(d.frames)
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	var head [5]byte
	for {
		if _, err := io.ReadFull(br, head[:]); err != nil {
			return
		}
		n := int64(binary.BigEndian.Uint32(head[1:]))
		keep := min(n, maxTextBytes)
		switch head[0] {
		case 'R':
			keep = min(n, maxRichBytes)
		case 'o', 'e':
			keep = min(n, d.outBytes)
		}
		payload := make([]byte, keep)
		if _, err := io.ReadFull(br, payload); err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, br, n-keep); err != nil {
			return
		}
		select {
		case d.frames <- frame{kind: head[0], payload: payload, cut: keep < n}:
		case <-d.quit:
			// Read on to the end: the driver never blocks on its frames.
		}
	}
}

// kill ends the driver's process group and waits for it.
func (d *driver) kill() {
	d.quitOnce.Do(func() { close(d.quit) })
	_ = d.proc.Signal(syscall.SIGKILL)
	<-d.done
	d.stdin.Close()
}

// send writes a request, or fails once the driver has ended.
func (d *driver) send(msg []byte) error {
	sent := make(chan error, 1)
	go func() {
		_, err := d.stdin.Write(msg)
		sent <- err
	}()
	select {
	case err := <-sent:
		return err
	case <-d.done:
		d.stdin.Close() // ends the write
		return errors.New("the driver has ended")
	}
}

// why says how the driver ended, once done.
func (d *driver) why() string {
	<-d.done
	r := d.report
	if r == nil {
		return "ended"
	}
	var why string
	switch {
	case r.OOMKilled || r.Status == api.StatusML:
		why = fmt.Sprintf("killed by signal %d (out of memory)", max(r.Signal, int(syscall.SIGKILL)))
	case r.Signal != 0:
		why = fmt.Sprintf("killed by signal %d (%s)", r.Signal, syscall.Signal(r.Signal))
	default:
		why = fmt.Sprintf("exited with code %d", r.ExitCode)
	}
	if last := lastLine(r.Stderr); last != "" {
		why += ": " + last
	}
	return why
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// Run executes code in the context. onStdout and onStderr (either may be
// nil) get the code's output as it arrives; Stdout and Stderr keep it, up
// to the session's output limit each. When ctx ends first the code is
// interrupted (SIGINT: Python's KeyboardInterrupt, "Interrupted" in
// JavaScript and Bash); code that does not stop within a
// second is killed with its context, and the call answers ContextDied.
// What the code leaves writing between calls (a thread, a child process)
// comes with the next call's output.
// The error is for a call that could not run at all (the session ended,
// the context closed, a new context would not start).
func (c *CodeContext) Run(ctx context.Context, code string, onStdout, onStderr func(string)) (*Execution, error) {
	if len(code) > maxCodeBytes {
		return nil, &api.FieldError{Field: "code", Msg: fmt.Sprintf("over %d bytes", maxCodeBytes)}
	}
	c.call.Lock()
	defer c.call.Unlock()
	if isDone(c.ended) {
		return nil, api.ErrSessionEnded
	}
	ex := &Execution{}
	c.mu.Lock()
	d, closed := c.drv, c.closed
	if d != nil && isDone(d.done) {
		// It died between calls.
		c.drv, c.died = nil, true
	}
	c.mu.Unlock()
	if closed {
		return nil, ErrContextClosed
	}
	if d == nil || isDone(d.done) {
		if d != nil {
			d.kill()
		}
		if err := c.startDriver(ctx); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	d, ex.Restarted, c.died = c.drv, c.died, false
	c.mu.Unlock()
	if d == nil {
		return nil, ErrContextClosed
	}
	// The call's frames run from the driver's "b" naming this nonce to
	// its "d" naming it: what an earlier call left or forged is dropped.
	var nb [12]byte
	rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	// Stream: someone reads the output as it comes (Bash's driver sends
	// it at the end otherwise).
	req := driverRequest{Code: code, Limit: c.outputLimit, Nonce: nonce, Stream: onStdout != nil || onStderr != nil}
	if err := req.withCallOptions(ctx); err != nil {
		return nil, err
	}
	var msg []byte
	var err error
	if c.language == "bash" {
		msg, err = bashRequest(&req)
	} else {
		msg, err = json.Marshal(req)
		msg = append(binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(msg)), uint32(len(msg))), msg...)
	}
	if err != nil {
		return nil, err
	}
	// A driver that died before reading it fails the write (its pipe is
	// closed once the process has ended); its end of frames says why.
	if err := d.send(msg); err != nil {
		return c.answerDied(ex, d)
	}
	// The code's output comes whole to the callbacks; the answer keeps
	// its head and its tail, as a session command's report does.
	stdout := headtail.Buffer{Limit: c.outputLimit, HeadTail: true}
	stderr := headtail.Buffer{Limit: c.outputLimit, HeadTail: true}
	keep := func(kept *headtail.Buffer, text []byte, on func(string)) {
		kept.Keep(text)
		if on != nil {
			on(string(text))
		}
	}
	answer := func() {
		out, outCut := stdout.Kept()
		errs, errCut := stderr.Kept()
		ex.Stdout, ex.Stderr, ex.Truncated = out, errs, outCut || errCut
	}
	onResult, _ := ctx.Value(resultHandlerKey{}).(func(Result))
	resultBytes, haveMain := 0, false
	addResult := func(r Result, n int) {
		if resultBytes+n+len(r.Text) > maxResultsBytes {
			return
		}
		resultBytes += n + len(r.Text)
		ex.Results = append(ex.Results, r)
		if onResult != nil {
			onResult(r)
		}
	}
	var grace <-chan time.Time
	var resend *time.Ticker
	done := ctx.Done()
	begun := false
	for {
		select {
		case f, ok := <-d.frames:
			if !ok {
				answer()
				return c.answerDied(ex, d)
			}
			if !begun {
				begun = f.kind == 'b' && string(f.payload) == nonce
				continue
			}
			switch f.kind {
			case 'i':
				if resend != nil {
					resend.Stop()
					resend = nil
				}
			case 'o':
				keep(&stdout, f.payload, onStdout)
			case 'e':
				keep(&stderr, f.payload, onStderr)
			case 's':
				// Bytes the driver skipped between a stream's head and
				// its tail (Bash: "o N").
				if n, err := strconv.ParseInt(string(f.payload[min(2, len(f.payload)):]), 10, 64); err == nil && n > 0 {
					switch f.payload[0] {
					case 'o':
						stdout.Skip(n)
					case 'e':
						stderr.Skip(n)
					}
				}
			case 'r':
				s := string(f.payload)
				if f.cut {
					s = strings.ToValidUTF8(s, "") + "..."
				}
				ex.Result = &s
				if !haveMain {
					// A value with only its text: the driver sent no R.
					addResult(Result{Text: s, IsMainResult: true}, 0)
				}
			case 'R':
				var r Result
				if f.cut || json.Unmarshal(f.payload, &r) != nil {
					continue
				}
				haveMain = haveMain || r.IsMainResult
				addResult(r, len(f.payload))
			case 'x':
				var e ExecError
				if json.Unmarshal(f.payload, &e) != nil {
					e = ExecError{Name: "Error", Value: "the error's description was over the bound and is left out"}
				}
				ex.Error = &e
			case 'd':
				var end struct {
					ExecutionCount int    `json:"execution_count"`
					Nonce          string `json:"nonce"`
				}
				if json.Unmarshal(f.payload, &end) != nil || end.Nonce != nonce {
					continue // not this call's end
				}
				ex.ExecutionCount = end.ExecutionCount
				answer()
				return ex, nil
			}
		case <-done:
			// The call's bound: interrupt the code, as Ctrl-C would.
			done = nil
			_ = d.proc.Signal(syscall.SIGINT)
			grace = time.After(interruptGrace)
			resend = time.NewTicker(interruptResend)
			defer resend.Stop()
		case <-tick(resend):
			// The driver takes an interrupt only while the code runs: one
			// that came before it started is sent again.
			_ = d.proc.Signal(syscall.SIGINT)
		case <-grace:
			d.kill()
			answer()
			c.forget(d)
			ex.Error = &ExecError{Name: ErrorContextDied, Value: fmt.Sprintf("the code did not stop within %v of the interrupt at the call's end (%v); the context was killed", interruptGrace, context.Cause(ctx))}
			return ex, nil
		case <-c.ended:
			d.kill()
			c.forget(d)
			return nil, api.ErrSessionEnded
		}
	}
}

// answerDied answers a call whose driver died: the next call starts a fresh one.
// A driver killed as its session ended is the session's end.
func (c *CodeContext) answerDied(ex *Execution, d *driver) (*Execution, error) {
	why := d.why()
	d.kill()
	if closed := c.forget(d); closed {
		return nil, ErrContextClosed
	}
	if isDone(c.ended) || d.report != nil && d.report.Status == api.StatusXX {
		return nil, api.ErrSessionEnded
	}
	ex.Error = &ExecError{Name: ErrorContextDied, Value: why}
	return ex, nil
}

// forget drops d, dead, as the context's driver: the next call starts a
// fresh one. It says whether the context was closed.
func (c *CodeContext) forget(d *driver) (closed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.drv == d {
		c.drv, c.died = nil, true
	}
	return c.closed
}

// Close ends the context's process, also while a call runs (the call
// answers that the context is closed).
func (c *CodeContext) Close() error {
	c.mu.Lock()
	d, closed := c.drv, c.closed
	c.drv, c.closed = nil, true
	c.mu.Unlock()
	if closed || d == nil {
		return nil
	}
	if c.call.TryLock() {
		// Idle: the end of its requests ends it; code it left running in
		// a thread gets a moment, then the kill.
		d.stdin.Close()
		select {
		case <-d.done:
		case <-time.After(interruptGrace):
		}
		c.call.Unlock()
	}
	d.kill()
	return nil
}

// bashRequest is the request r as the Bash driver reads it
// (codedriver/bash.sh): lengths on lines, then the bytes. Bash's variables
// hold no NUL byte: code, cwd or env with one is refused.
func bashRequest(r *driverRequest) ([]byte, error) {
	if strings.IndexByte(r.Code, 0) >= 0 {
		return nil, &api.FieldError{Field: "code", Msg: "a NUL byte, which bash code cannot hold"}
	}
	if strings.IndexByte(r.Cwd, 0) >= 0 {
		return nil, &api.FieldError{Field: "cwd", Msg: "a NUL byte"}
	}
	var b []byte
	stream := 0
	if r.Stream {
		stream = 1
	}
	b = fmt.Appendf(b, "%s %d %d %d %d %d\n%s%s", r.Nonce, r.Limit, len(r.Code), len(r.Cwd), len(r.Env), stream, r.Code, r.Cwd)
	names := make([]string, 0, len(r.Env))
	for k := range r.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		kv := k + "=" + r.Env[k]
		if strings.IndexByte(kv, 0) >= 0 {
			return nil, &api.FieldError{Field: "env", Msg: fmt.Sprintf("%s: a NUL byte", k)}
		}
		b = fmt.Appendf(b, "%d\n%s", len(kv), kv)
	}
	return b, nil
}

// tick is t's channel, nil (never ready) for no ticker.
func tick(t *time.Ticker) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

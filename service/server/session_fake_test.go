package server

// The sessions' HTTP layer over a fake SessionHost, without root: who
// may see what, the caps, the lease and idle time (on the registry's own
// clock, checked by state), bad input, and that ending a session closes
// everything in it. The fake's boxes are directories and goroutines;
// session_test.go runs the same API over real boxes.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/service/caller"
	"github.com/isolate-sandbox/isolate/service/filestore"
)

// fakeHost makes fake boxes and remembers them.
type fakeHost struct {
	t     *testing.T
	code  bool // its boxes run code contexts (stubs)
	mu    sync.Mutex
	boxes []*fakeBox
	specs []api.Spec
}

func (h *fakeHost) StartSession(ctx context.Context, spec *api.Spec) (SessionBox, error) {
	if spec.Image == "no-such-image" {
		return nil, &api.FieldError{Field: "image", Msg: "no such image"}
	}
	b := &fakeBox{dir: h.t.TempDir(), done: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.boxes = append(h.boxes, b)
	h.specs = append(h.specs, *spec)
	if h.code {
		return fakeCodeBox{b}, nil
	}
	return b, nil
}

// fakeCodeBox is a fakeBox whose code contexts are stubs: each call
// answers an empty execution.
type fakeCodeBox struct{ *fakeBox }

func (fakeCodeBox) NewCodeContext(language string) (CodeContext, error) {
	return fakeCodeContext{}, nil
}

type fakeCodeContext struct{}

func (fakeCodeContext) Run(context.Context, string, func(string), func(string)) (*Execution, error) {
	return &Execution{}, nil
}

func (fakeCodeContext) Close() error { return nil }

func (h *fakeHost) box(i int) *fakeBox {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.boxes[i]
}

// fakeBox runs a few programs as goroutines: echo ARGS, cat (stdin to
// stdout), sleep (until signalled or the session ends), env.
type fakeBox struct {
	dir    string
	mu     sync.Mutex
	done   chan struct{}
	closed bool
	next   uint64
	procs  []*fakeProc
	cmds   []isolate.SessionCommand // as started
}

type fakeProc struct {
	id     uint64
	done   chan struct{}
	sig    chan syscall.Signal
	report *api.Report
}

func (p *fakeProc) ID() uint64            { return p.id }
func (p *fakeProc) Done() <-chan struct{} { return p.done }
func (p *fakeProc) Wait() *api.Report     { <-p.done; return p.report }
func (p *fakeProc) Signal(s syscall.Signal) error {
	select {
	case p.sig <- s:
	case <-p.done:
	}
	return nil
}

func (b *fakeBox) Start(cmd isolate.SessionCommand, stdio isolate.IO) (SessionProcess, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, isolate.ErrSessionEnded
	}
	b.next++
	b.cmds = append(b.cmds, cmd)
	p := &fakeProc{id: b.next, done: make(chan struct{}), sig: make(chan syscall.Signal, 1)}
	b.procs = append(b.procs, p)
	go func() {
		var out bytes.Buffer
		var w io.Writer = &out
		if stdio.Stdout != nil {
			w = io.MultiWriter(&out, stdio.Stdout)
		}
		rep := &api.Report{Status: api.StatusOK}
		switch cmd.Args[0] {
		case "echo":
			fmt.Fprintln(w, strings.Join(cmd.Args[1:], " "))
		case "env":
			fmt.Fprintln(w, strings.Join(cmd.Env, "\n"))
		case "cat":
			if stdio.Stdin != nil {
				io.Copy(w, stdio.Stdin)
			}
		case "zeros": // zeros N: N bytes, kept up to the output limit
			var n int64
			fmt.Sscan(cmd.Args[1], &n)
			if cmd.OutputLimit > 0 {
				n = min(n, cmd.OutputLimit)
			}
			w.Write(make([]byte, n))
		case "sleep":
			select {
			case s := <-p.sig:
				rep = &api.Report{Status: api.StatusSG, Signal: int(s)}
			case <-b.done:
				rep = &api.Report{Status: api.StatusXX, Message: isolate.ErrSessionEnded.Error()}
			}
		}
		rep.Stdout = out.String()
		p.report = rep
		close(p.done)
	}()
	return p, nil
}

func (b *fakeBox) running() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, p := range b.procs {
		select {
		case <-p.done:
		default:
			n++
		}
	}
	return n
}

func (b *fakeBox) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

func (b *fakeBox) Usage() (isolate.SessionUsage, error) {
	return isolate.SessionUsage{MemoryBytes: 1 << 20, MemoryPeak: 2 << 20, Pids: 1, PidsPeak: 2}, nil
}

func (b *fakeBox) path(p string) string {
	if !filepath.IsAbs(p) {
		p = "/box/" + p
	}
	return filepath.Join(b.dir, filepath.Clean(p))
}

func (b *fakeBox) info(p string, st os.FileInfo) isolate.FileInfo {
	return isolate.FileInfo{Name: st.Name(), Path: p, Size: st.Size(), Mode: st.Mode(), IsDir: st.IsDir(), ModTime: st.ModTime()}
}

func (b *fakeBox) WriteFile(p string, r io.Reader, mode os.FileMode) (int64, error) {
	os.MkdirAll(filepath.Dir(b.path(p)), 0o755)
	f, err := os.OpenFile(b.path(p), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(f, r)
}

func (b *fakeBox) OpenFile(p string) (*os.File, isolate.FileInfo, error) {
	f, err := os.Open(b.path(p))
	if err != nil {
		return nil, isolate.FileInfo{}, err
	}
	st, _ := f.Stat()
	return f, b.info(p, st), nil
}

func (b *fakeBox) Stat(p string) (isolate.FileInfo, error) {
	st, err := os.Lstat(b.path(p))
	if err != nil {
		return isolate.FileInfo{}, err
	}
	return b.info(p, st), nil
}

func (b *fakeBox) List(p string, max int) ([]isolate.FileInfo, error) {
	ents, err := os.ReadDir(b.path(p))
	if err != nil {
		return nil, err
	}
	var out []isolate.FileInfo
	for _, e := range ents {
		st, _ := e.Info()
		out = append(out, b.info(filepath.Join(p, e.Name()), st))
	}
	return out, nil
}

func (b *fakeBox) Remove(p string) error { return os.RemoveAll(b.path(p)) }
func (b *fakeBox) Done() <-chan struct{} { return b.done }
func (b *fakeBox) Err() error            { return nil }

func (b *fakeBox) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.done)
	}
	procs := b.procs
	b.mu.Unlock()
	for _, p := range procs {
		<-p.done
	}
	return nil
}

// sessionFake is a service over a fakeHost, reached through its handler
// with the caller each request names.
type sessionFake struct {
	*Server
	host  *fakeHost
	clock time.Time
	mu    sync.Mutex
}

func newSessionFake(t *testing.T, adjust func(*Config)) *sessionFake {
	h := &fakeHost{t: t}
	store, err := filestore.Open(filepath.Join(t.TempDir(), "files"), 1<<20, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := Config{Runner: refusingRunner{}, Store: store, Sessions: h, Parallel: 2, Queue: 4, MaxSessions: 4, MaxSessionsPerCaller: 2}
	if adjust != nil {
		adjust(&cfg)
	}
	f := &sessionFake{Server: New(cfg), host: h, clock: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.sessions.now = func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.clock }
	t.Cleanup(func() { f.Shutdown(time.Second) })
	return f
}

// advance moves the registry's clock and checks every session against it.
func (f *sessionFake) advance(d time.Duration) {
	f.mu.Lock()
	f.clock = f.clock.Add(d)
	f.mu.Unlock()
	f.sessions.sweep()
}

var (
	alice = caller.Caller{Via: caller.API, UID: 1001, GID: 1001}
	bob   = caller.Caller{Via: caller.API, UID: 1002, GID: 1002}
	root  = caller.Caller{Via: caller.API, UID: 0, GID: 0}
	tcp   = caller.Unknown
)

// do sends one request as who.
func (f *sessionFake) do(t *testing.T, who caller.Caller, method, path, body string) (int, []byte) {
	t.Helper()
	r := httptest.NewRequest(method, "http://isolate"+path, strings.NewReader(body))
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, who))
	w := httptest.NewRecorder()
	f.Handler().ServeHTTP(w, r)
	return w.Code, w.Body.Bytes()
}

// create makes a session as who and returns its id.
func (f *sessionFake) create(t *testing.T, who caller.Caller, body string) string {
	t.Helper()
	code, b := f.do(t, who, "POST", "/v1/sessions", body)
	var a struct{ ID string }
	if json.Unmarshal(b, &a); code != http.StatusCreated || a.ID == "" {
		t.Fatalf("POST /v1/sessions %s: %d %s", body, code, b)
	}
	return a.ID
}

// waitAnswer is what a wait for a command answers once it ended: its
// report, with its id beside it.
type waitAnswer struct {
	ID      uint64 `json:"id"`
	Running bool   `json:"running"`
	api.Report
}

func decodeAs[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

func TestSessionLifecycleFake(t *testing.T) {
	f := newSessionFake(t, nil)
	code, b := f.do(t, alice, "POST", "/v1/sessions", `{"timeout_ms": 60000, "idle_timeout_ms": 30000}`)
	created := decodeAs[struct {
		ID            string    `json:"id"`
		ExpiresAt     time.Time `json:"expires_at"`
		IdleExpiresAt time.Time `json:"idle_expires_at"`
	}](t, b)
	if code != 201 || !created.ExpiresAt.Equal(f.clock.Add(time.Minute)) || !created.IdleExpiresAt.Equal(f.clock.Add(30*time.Second)) {
		t.Fatalf("create: %d %s", code, b)
	}
	id := created.ID
	base := "/v1/sessions/" + id
	// A foreground command answers its report.
	code, b = f.do(t, alice, "POST", base+"/commands", `{"args": ["echo", "hello"]}`)
	if rep := decodeAs[api.Report](t, b); code != 200 || rep.Status != "OK" || rep.Stdout != "hello\n" || rep.Sandbox.Via != "service" {
		t.Fatalf("echo: %d %s", code, b)
	}
	// Its env adds to the session's.
	code, b = f.do(t, alice, "POST", base+"/commands", `{"args": ["env"], "env": ["A=1"]}`)
	if rep := decodeAs[api.Report](t, b); code != 200 || !strings.Contains(rep.Stdout, "PATH=") || !strings.Contains(rep.Stdout, "A=1") {
		t.Fatalf("env: %d %s", code, b)
	}
	// Streamed: output lines, then the report.
	code, b = f.do(t, alice, "POST", base+"/commands", `{"args": ["echo", "streamed"], "stream": true}`)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if code != 200 || len(lines) != 2 || lines[0] != `{"type":"stdout","data":"streamed\n"}` || !strings.HasPrefix(lines[1], `{"type":"report","status":"OK"`) {
		t.Fatalf("streamed: %d %s", code, b)
	}
	// A background command keeps its stdin open for later requests.
	code, b = f.do(t, alice, "POST", base+"/commands", `{"args": ["cat"], "background": true, "stdin": "first "}`)
	bg := decodeAs[struct {
		ID      uint64 `json:"id"`
		Running bool   `json:"running"`
	}](t, b)
	if code != 201 || !bg.Running || bg.ID == 0 {
		t.Fatalf("background: %d %s", code, b)
	}
	pbase := fmt.Sprintf("%s/commands/%d", base, bg.ID)
	if code, b := f.do(t, alice, "GET", pbase, ""); code != 200 || !strings.Contains(string(b), `"running":true`) {
		t.Fatalf("background, running: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "POST", pbase+"/stdin?close=1", "second"); code != 200 {
		t.Fatalf("stdin: %d %s", code, b)
	}
	code, b = f.do(t, alice, "POST", pbase+"/wait", `{"timeout_ms": 10000}`)
	st := decodeAs[waitAnswer](t, b)
	if code != 200 || st.Running || st.ID != bg.ID || st.Stdout != "first second" {
		t.Fatalf("wait: %d %s", code, b)
	}
	// Signals reach a background command.
	code, b = f.do(t, alice, "POST", base+"/commands", `{"args": ["sleep"], "background": true}`)
	sleeper := decodeAs[struct{ ID uint64 }](t, b).ID
	if code, b := f.do(t, alice, "POST", fmt.Sprintf("%s/commands/%d/wait", base, sleeper), `{"timeout_ms": 1}`); code != 200 || string(b) != fmt.Sprintf(`{"id":%d,"args":["sleep"],"running":true}`+"\n", sleeper) {
		t.Fatalf("wait, still running: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "POST", fmt.Sprintf("%s/commands/%d/signal", base, sleeper), `{"signal": "TERM"}`); code != 200 {
		t.Fatalf("signal: %d %s", code, b)
	}
	code, b = f.do(t, alice, "POST", fmt.Sprintf("%s/commands/%d/wait", base, sleeper), "")
	if st := decodeAs[waitAnswer](t, b); code != 200 || st.Status != "SG" || st.Signal != 15 {
		t.Fatalf("signalled: %d %s", code, b)
	}
	// The session's description: usage, its commands.
	code, b = f.do(t, alice, "GET", base, "")
	info := decodeAs[SessionAnswer](t, b)
	if code != 200 || info.Usage == nil || info.Usage.MemoryPeak != 2<<20 || len(info.Processes) != 2 || info.Processes[0].Running {
		t.Fatalf("describe: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "GET", "/v1/sessions", ""); code != 200 || !strings.Contains(string(b), id) {
		t.Fatalf("list: %d %s", code, b)
	}
	// A background command left running dies with the session.
	f.do(t, alice, "POST", base+"/commands", `{"args": ["sleep"], "background": true}`)
	box := f.host.box(0)
	if box.running() != 1 {
		t.Fatalf("%d commands running, want 1", box.running())
	}
	if code, b := f.do(t, alice, "DELETE", base, ""); code != 204 {
		t.Fatalf("delete: %d %s", code, b)
	}
	if !box.isClosed() || box.running() != 0 || f.sessions.count() != 0 {
		t.Fatalf("after delete: closed %v, %d running, %d sessions", box.isClosed(), box.running(), f.sessions.count())
	}
	if code, _ := f.do(t, alice, "GET", base, ""); code != 404 {
		t.Fatalf("deleted session: %d", code)
	}
}

// Another caller's session is not found, word for word as an unknown
// one, whatever it asks; a caller's list holds its own only.
func TestSessionOwnerFake(t *testing.T) {
	f := newSessionFake(t, nil)
	id := f.create(t, alice, `{}`)
	f.do(t, alice, "PUT", "/v1/sessions/"+id+"/files/secret.txt", "alice's")
	_, unknown := f.do(t, bob, "GET", "/v1/sessions/0123456789abcdef0123456789abcdef", "")
	for _, who := range []caller.Caller{bob, root, tcp} {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "", ""},
			{"DELETE", "", ""},
			{"POST", "/timeout", `{"timeout_ms": 1000}`},
			{"POST", "/commands", `{"args": ["echo"]}`},
			{"GET", "/files/secret.txt", ""},
			{"PUT", "/files/x", "x"},
			{"DELETE", "/files/secret.txt", ""},
		} {
			code, b := f.do(t, who, c.method, "/v1/sessions/"+id+c.path, c.body)
			if code != 404 || (c.path == "" && c.method == "GET" && !bytes.Equal(b, unknown)) {
				t.Errorf("%s %s%s as %v: %d %s", c.method, id, c.path, who, code, b)
			}
		}
		if _, b := f.do(t, who, "GET", "/v1/sessions", ""); strings.Contains(string(b), id) {
			t.Errorf("%v's list shows alice's session: %s", who, b)
		}
	}
	if code, b := f.do(t, alice, "GET", "/v1/sessions/"+id+"/files/secret.txt", ""); code != 200 || string(b) != "alice's" {
		t.Fatalf("its owner: %d %s", code, b)
	}
}

func TestSessionCapsFake(t *testing.T) {
	f := newSessionFake(t, nil) // 4 in all, 2 per caller
	a1 := f.create(t, alice, `{}`)
	f.create(t, alice, `{}`)
	if code, b := f.do(t, alice, "POST", "/v1/sessions", `{}`); code != 429 || !strings.Contains(string(b), "--max-sessions-per-caller") {
		t.Fatalf("alice's third: %d %s", code, b)
	}
	f.create(t, bob, `{}`)
	f.create(t, tcp, `{}`)
	if code, b := f.do(t, root, "POST", "/v1/sessions", `{}`); code != 429 || !strings.Contains(string(b), "--max-sessions)") {
		t.Fatalf("the fifth: %d %s", code, b)
	}
	f.do(t, alice, "DELETE", "/v1/sessions/"+a1, "")
	f.create(t, alice, `{}`)
	// A failed start gives its place back.
	if code, b := f.do(t, alice, "POST", "/v1/sessions", `{}`); code != 429 {
		t.Fatalf("alice's third again: %d %s", code, b)
	}
	if got := f.sessions.count(); got != 4 {
		t.Fatalf("%d sessions, want 4", got)
	}
}

// A session keeps 64 background commands: past 64 that ended, the next
// is taken and the oldest is forgotten; with 64 running (a service with
// slots for them), the next is refused (429).
func TestSessionBackgroundRecordsBoundedFake(t *testing.T) {
	f := newSessionFake(t, func(c *Config) {
		c.Parallel, c.Queue = 2*maxProcessRecords, 2*maxProcessRecords
		c.Ledger = caller.NewLedger(caller.Budget{Bytes: caller.DefaultHeldBytes, Background: 2 * maxProcessRecords})
	})
	base := "/v1/sessions/" + f.create(t, alice, `{}`)
	start := func(args string) (int, []byte, string) {
		code, b := f.do(t, alice, "POST", base+"/commands", `{"args": `+args+`, "background": true, "output_limit_bytes": 1024}`)
		return code, b, fmt.Sprintf("%s/commands/%d", base, decodeAs[struct{ ID uint64 }](t, b).ID)
	}
	var ended []string
	for range maxProcessRecords {
		code, b, p := start(`["echo", "done"]`)
		if code != 201 {
			t.Fatalf("background command %d: %d %s", len(ended)+1, code, b)
		}
		if code, b := f.do(t, alice, "POST", p+"/wait", ""); code != 200 || strings.Contains(string(b), `"running":true`) {
			t.Fatalf("%s: %d %s", p, code, b)
		}
		ended = append(ended, p)
	}
	code, b, more := start(`["echo", "more"]`)
	if code != 201 {
		t.Fatalf("the 65th once 64 ended: %d %s", code, b)
	}
	f.do(t, alice, "POST", more+"/wait", "")
	if code, b := f.do(t, alice, "GET", ended[0], ""); code != 404 {
		t.Fatalf("the oldest ended one, after the 65th: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "GET", ended[1], ""); code != 200 {
		t.Fatalf("the second: %d %s", code, b)
	}
	for i := range maxProcessRecords {
		if code, b, _ := start(`["sleep"]`); code != 201 {
			t.Fatalf("sleeping command %d: %d %s", i+1, code, b)
		}
	}
	if code, b := f.do(t, alice, "POST", base+"/commands", `{"args": ["sleep"], "background": true, "output_limit_bytes": 1024}`); code != 429 ||
		!strings.Contains(string(b), "64 commands run in this session already") {
		t.Fatalf("one more with 64 running: %d %s", code, b)
	}
}

// The lease ends a session even while a command runs (which answers
// XX); idle time ends one nobody uses, never one in use.
func TestSessionExpiryFake(t *testing.T) {
	f := newSessionFake(t, nil)
	id := f.create(t, alice, `{"timeout_ms": 60000, "idle_timeout_ms": 600000}`)
	answered := make(chan []byte)
	go func() {
		_, b := f.do(t, alice, "POST", "/v1/sessions/"+id+"/commands", `{"args": ["sleep"]}`)
		answered <- b
	}()
	box := f.host.box(0)
	for box.running() == 0 {
		time.Sleep(time.Millisecond)
	}
	f.advance(59 * time.Second)
	if f.sessions.count() != 1 {
		t.Fatal("ended before its lease")
	}
	// Renewed from now: 60 s more.
	if code, b := f.do(t, alice, "POST", "/v1/sessions/"+id+"/timeout", `{"timeout_ms": 60000}`); code != 200 || !strings.Contains(string(b), f.clock.Add(time.Minute).Format(time.RFC3339)) {
		t.Fatalf("renew: %d %s", code, b)
	}
	f.advance(59 * time.Second)
	if f.sessions.count() != 1 {
		t.Fatal("ended before its renewed lease")
	}
	f.advance(time.Second)
	rep := decodeAs[api.Report](t, <-answered)
	if rep.Status != "XX" || rep.Message != "the session has ended" || f.sessions.count() != 0 || !box.isClosed() {
		t.Fatalf("after the lease: %+v, %d sessions, closed %v", rep, f.sessions.count(), box.isClosed())
	}

	// Idle: a background command runs, but nobody asks anything.
	id = f.create(t, alice, `{"idle_timeout_ms": 30000}`)
	box = f.host.box(1)
	f.do(t, alice, "POST", "/v1/sessions/"+id+"/commands", `{"args": ["sleep"], "background": true}`)
	f.advance(29 * time.Second)
	f.do(t, alice, "GET", "/v1/sessions/"+id, "") // a use
	f.advance(29 * time.Second)
	if f.sessions.count() != 1 {
		t.Fatal("ended while used")
	}
	f.advance(time.Second)
	if f.sessions.count() != 0 || !box.isClosed() || box.running() != 0 {
		t.Fatalf("after its idle time: %d sessions, closed %v, %d running", f.sessions.count(), box.isClosed(), box.running())
	}
	// A request in progress is a use however long it takes.
	id = f.create(t, alice, `{"idle_timeout_ms": 30000, "timeout_ms": 3600000}`)
	box = f.host.box(2)
	go f.do(t, alice, "POST", "/v1/sessions/"+id+"/commands", `{"args": ["sleep"], "timeout_ms": 600000}`)
	for box.running() == 0 {
		time.Sleep(time.Millisecond)
	}
	f.advance(10 * time.Minute)
	if f.sessions.count() != 1 {
		t.Fatal("a session running a foreground command ended as idle")
	}
}

func TestSessionBadInputFake(t *testing.T) {
	f := newSessionFake(t, func(c *Config) {
		c.Policy.Caps.MemoryBytes = 256 << 20
		c.Policy.Caps.WallTimeMs = 10000
		c.SessionMaxTimeout = time.Hour
		c.MaxBodyBytes = 1 << 10
	})
	for _, c := range []struct {
		path, body string
		code       int
		field      string
	}{
		{"", `{"timeout_ms": 3600001}`, 400, "timeout_ms"},
		{"", `{"timeout_ms": -1}`, 400, "timeout_ms"},
		{"", `{"idle_timeout_ms": "soon"}`, 400, "idle_timeout_ms"},
		{"", `{"memory_bytes": 1073741824}`, 400, "memory_bytes"},
		{"", `{"args": ["x"]}`, 400, "args"},
		{"", `{"box_id": 3}`, 400, "box_id"},
		{"", `{"net": "host"}`, 403, "net"},
		{"", `{"net": "wide"}`, 400, "net"},
		{"", `{"env": ["NOEQUALS"]}`, 400, "env[0]"},
		{"", `{"image": "no-such-image"}`, 400, "image"},
		{"", `{"output_limit_bytes": -1}`, 400, "output_limit_bytes"},
		{"", `{} {}`, 400, "(body)"},
		{"", `{"x": "` + strings.Repeat("y", 2000) + `"}`, 413, ""},
		{"/commands", `{"args": []}`, 400, "args"},
		{"/commands", `{"args": ["echo"], "cwd": "box"}`, 400, "cwd"},
		{"/commands", `{"args": ["echo"], "timeout_ms": 20000}`, 400, "timeout_ms"},
		{"/commands", `{"args": ["echo"], "env": ["=1"]}`, 400, "env[0]"},
		{"/commands", `{"args": ["echo"], "output_limit_bytes": 1073741824}`, 400, "output_limit_bytes"},
		{"/commands", `{"args": ["echo"], "background": "yes"}`, 400, "background"},
		{"/timeout", `{"timeout_ms": 7200000}`, 400, "timeout_ms"},
		{"/code", `{"code": "1", "language": "ruby"}`, 400, "language"},
	} {
		path := "/v1/sessions"
		if c.path != "" {
			path += "/" + f.create(t, alice, `{}`) + c.path
		}
		code, b := f.do(t, alice, "POST", path, c.body)
		e := decodeAs[errorBody](t, b)
		if code != c.code || e.Field != c.field || e.Error == "" {
			t.Errorf("%s %.80s: %d %s, want %d naming %q", c.path, c.body, code, b, c.code, c.field)
		}
		f.sessions.closeAll()
		f.sessions.closed = false
	}
	// The cap is the default of a limit left out.
	f.create(t, alice, `{}`)
	if got := f.host.specs[len(f.host.specs)-1].MemoryBytes; got != 256<<20 {
		t.Errorf("memory_bytes left out: %d, want the cap", got)
	}
	id := f.create(t, alice, `{}`)
	code, b := f.do(t, alice, "POST", "/v1/sessions/"+id+"/commands", `{"args": ["sleep"], "background": true}`)
	pid := decodeAs[struct{ ID uint64 }](t, b).ID
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", fmt.Sprintf("/commands/%d/signal", pid), `{"signal": "NOPE"}`, "signal"},
		{"POST", fmt.Sprintf("/commands/%d/signal", pid), `{"signal": 65}`, "signal"},
		{"POST", fmt.Sprintf("/commands/%d/signal", pid), `{"signal": {}}`, "signal"},
		{"POST", fmt.Sprintf("/commands/%d/stdin?close=yes", pid), "x", "close"},
		{"PUT", "/files/a.txt?mode=888", "x", "mode"},
		{"PUT", "/files/a.txt?mode=01777", "x", "mode"},
	} {
		code, b := f.do(t, alice, c.method, "/v1/sessions/"+id+c.path, c.body)
		if e := decodeAs[errorBody](t, b); code != 400 || e.Field != c.field {
			t.Errorf("%s %s: %d %s, want 400 naming %s", c.path, c.body, code, b, c.field)
		}
	}
	if code != 201 {
		t.Fatalf("background: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "GET", "/v1/sessions/"+id+"/commands/999", ""); code != 404 {
		t.Errorf("unknown command: %d %s", code, b)
	}
}

func TestSessionFilesFake(t *testing.T) {
	f := newSessionFake(t, nil)
	base := "/v1/sessions/" + f.create(t, alice, `{}`) + "/files"
	big := strings.Repeat("0123456789", 100_000)
	if code, b := f.do(t, alice, "PUT", base+"/dir/a.txt?mode=0600", big); code != 200 || string(b) != `{"path":"dir/a.txt","size":1000000}`+"\n" {
		t.Fatalf("put: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "GET", base+"/dir/a.txt", ""); code != 200 || string(b) != big {
		t.Fatalf("get: %d, %d bytes", code, len(b))
	}
	code, b := f.do(t, alice, "GET", base+"/dir/a.txt?stat=1", "")
	if info := decodeAs[isolate.FileInfo](t, b); code != 200 || info.Size != 1e6 || info.Mode.Perm() != 0o600 || info.IsDir {
		t.Fatalf("stat: %d %s", code, b)
	}
	// An absolute path, its slash escaped or not.
	for _, p := range []string{"//box/dir?list=1", "/%2Fbox%2Fdir?list=1", "/dir?list=1"} {
		code, b := f.do(t, alice, "GET", base+p, "")
		if l := decodeAs[struct{ Entries []isolate.FileInfo }](t, b); code != 200 || len(l.Entries) != 1 || l.Entries[0].Name != "a.txt" {
			t.Errorf("list %s: %d %s", p, code, b)
		}
	}
	if code, b := f.do(t, alice, "PUT", base+"//tmp/t", "in tmp"); code != 200 || !strings.Contains(string(b), `"path":"/tmp/t"`) {
		t.Fatalf("put /tmp/t: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "DELETE", base+"/dir", ""); code != 204 {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "GET", base+"/dir/a.txt", ""); code != 404 || !strings.Contains(string(b), `"field":"path"`) {
		t.Fatalf("deleted file: %d %s", code, b)
	}
}

// The service's shutdown ends every session and kills what runs there.
func TestSessionShutdownFake(t *testing.T) {
	f := newSessionFake(t, nil)
	for _, who := range []caller.Caller{alice, bob} {
		id := f.create(t, who, `{}`)
		f.do(t, who, "POST", "/v1/sessions/"+id+"/commands", `{"args": ["sleep"], "background": true}`)
	}
	f.Shutdown(time.Second)
	for i := range 2 {
		if b := f.host.box(i); !b.isClosed() || b.running() != 0 {
			t.Errorf("box %d after the shutdown: closed %v, %d running", i, b.isClosed(), b.running())
		}
	}
	if code, b := f.do(t, alice, "POST", "/v1/sessions", `{}`); code != 503 {
		t.Errorf("a session after the shutdown: %d %s", code, b)
	}
}

// Without code contexts in the host, /code says so.
// A session keeps 16 contexts: the 17th is refused (429) until one is
// deleted.
func TestSessionContextsBoundedFake(t *testing.T) {
	f := newSessionFake(t, nil)
	f.host.code = true
	base := "/v1/sessions/" + f.create(t, alice, `{}`)
	var first string
	for i := range maxContexts {
		code, b := f.do(t, alice, "POST", base+"/contexts", `{"language": "python"}`)
		if code != 201 {
			t.Fatalf("context %d: %d %s", i+1, code, b)
		}
		if i == 0 {
			first = decodeAs[struct{ ID string }](t, b).ID
		}
	}
	if code, b := f.do(t, alice, "POST", base+"/contexts", `{"language": "python"}`); code != 429 ||
		!strings.Contains(string(b), "16 contexts in this session already") {
		t.Fatalf("the 17th: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "DELETE", base+"/contexts/"+first, ""); code != 204 {
		t.Fatalf("delete %s: %d %s", first, code, b)
	}
	if code, b := f.do(t, alice, "POST", base+"/contexts", `{"language": "python"}`); code != 201 {
		t.Fatalf("one more once one was deleted: %d %s", code, b)
	}
}

func TestSessionCodeUnavailableFake(t *testing.T) {
	f := newSessionFake(t, nil)
	id := f.create(t, alice, `{}`)
	if code, b := f.do(t, alice, "POST", "/v1/sessions/"+id+"/code", `{"code": "1+1"}`); code != 501 {
		t.Errorf("code: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "POST", "/v1/sessions/"+id+"/contexts", `{"language": "python"}`); code != 501 {
		t.Errorf("contexts: %d %s", code, b)
	}
}

// A session past its lease is gone for a request that comes before its
// timer fires; the metrics count the sessions alive.
func TestSessionExpiredOnUseFake(t *testing.T) {
	f := newSessionFake(t, nil)
	id := f.create(t, alice, `{"timeout_ms": 1000}`)
	f.create(t, bob, `{}`)
	_, b := f.do(t, root, "GET", "/metrics", "")
	if !strings.Contains(string(b), "\nisolate_sessions 2\n") {
		t.Errorf("metrics with 2 sessions:\n%s", grepLines(string(b), "isolate_sessions"))
	}
	f.mu.Lock()
	f.clock = f.clock.Add(time.Second) // no sweep
	f.mu.Unlock()
	if code, b := f.do(t, alice, "GET", "/v1/sessions/"+id, ""); code != 404 {
		t.Fatalf("past its lease: %d %s", code, b)
	}
	if !f.host.box(0).isClosed() || f.sessions.count() != 1 {
		t.Fatalf("past its lease: closed %v, %d sessions", f.host.box(0).isClosed(), f.sessions.count())
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Waiters on a command hold none of the service's request places: more
// of them than there are places leave room for a command.
func TestSessionWaitersHoldNoPlaceFake(t *testing.T) {
	f := newSessionFake(t, nil) // 2 + 4 places
	id := f.create(t, alice, `{}`)
	_, b := f.do(t, alice, "POST", "/v1/sessions/"+id+"/commands", `{"args": ["sleep"], "background": true}`)
	pid := decodeAs[struct{ ID uint64 }](t, b).ID
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, b := f.do(t, alice, "POST", fmt.Sprintf("/v1/sessions/%s/commands/%d/wait", id, pid), `{"timeout_ms": 600000}`)
			if w := decodeAs[waitAnswer](t, b); code != 200 || w.Status != "SG" {
				t.Errorf("a waiter: %d %s", code, b)
			}
		}()
	}
	for {
		f.sessions.mu.Lock()
		s := f.sessions.byID[id]
		f.sessions.mu.Unlock()
		s.mu.Lock()
		busy := s.busy
		s.mu.Unlock()
		if busy == 8 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if code, b := f.do(t, alice, "POST", "/v1/sessions/"+id+"/commands", `{"args": ["echo", "room"]}`); code != 200 {
		t.Errorf("a command beside 8 waiters: %d %s", code, b)
	}
	f.do(t, alice, "POST", fmt.Sprintf("/v1/sessions/%s/commands/%d/signal", id, pid), `{"signal": "KILL"}`)
	wg.Wait()
}

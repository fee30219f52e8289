package isolate_test

import (
	"context"
	"errors"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/codecontext"
)

func newCodeContext(t testing.TB, s *isolate.Session) *codecontext.CodeContext {
	t.Helper()
	c, err := s.NewCodeContext("python")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func runCode(t testing.TB, c *codecontext.CodeContext, code string) *codecontext.Execution {
	t.Helper()
	ex, err := c.Run(context.Background(), code, nil, nil)
	if err != nil {
		t.Fatalf("%q: %v", code, err)
	}
	return ex
}

func resultOf(ex *codecontext.Execution) string {
	if ex.Result == nil {
		return "<none>"
	}
	return *ex.Result
}

// A context in a session keeps its state, streams what the code and its
// children write, and shares the session's box with its commands.
func TestCodeContextInSession(t *testing.T) {
	needRoot(t)
	s := startSession(t, newHost(t), &api.Spec{})
	c := newCodeContext(t, s)
	runCode(t, c, "x = 1")
	if ex := runCode(t, c, "x + 1"); resultOf(ex) != "2" || ex.ExecutionCount != 2 || ex.Error != nil {
		t.Fatalf("%+v", ex)
	}
	var mu sync.Mutex
	var streamed strings.Builder
	ex, err := c.Run(context.Background(), "import subprocess\nprint('py', flush=True)\nsubprocess.run(['sh', '-c', 'echo sh; echo e >&2'])\nopen('/box/made', 'w').write('by code')",
		func(s string) { mu.Lock(); streamed.WriteString(s); mu.Unlock() }, nil)
	if err != nil || ex.Stdout != "py\nsh\n" || ex.Stderr != "e\n" || resultOf(ex) != "7" || streamed.String() != ex.Stdout {
		t.Fatalf("%+v %v (streamed %q)", ex, err, streamed.String())
	}
	if rep := runIn(t, s, "cat", "/box/made"); rep.Stdout != "by code" {
		t.Errorf("the code's file, read by a command: %+v", rep)
	}
	ex = runCode(t, c, "1/0")
	if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || !strings.Contains(ex.Error.Traceback, "<cell 4>") {
		t.Errorf("%+v %+v", ex, ex.Error)
	}
}

// A context killed by the OOM killer under the session's memory limit says
// so, and the next call runs in a fresh one; the session lives on.
func TestCodeContextOOM(t *testing.T) {
	needRoot(t)
	s := startSession(t, newHost(t), &api.Spec{MemoryBytes: 64 << 20})
	c := newCodeContext(t, s)
	runCode(t, c, "kept = 1")
	ex := runCode(t, c, "x = bytearray(200 << 20)\nx[::4096] = b'x' * len(x[::4096])")
	if ex.Error == nil || ex.Error.Name != codecontext.ErrorContextDied || ex.Error.Value != "killed by signal 9 (out of memory)" {
		t.Fatalf("%+v %+v", ex, ex.Error)
	}
	ex = runCode(t, c, "'kept' in dir()")
	if !ex.Restarted || ex.ExecutionCount != 1 || resultOf(ex) != "False" {
		t.Errorf("after the OOM kill: %+v", ex)
	}
	if rep := runIn(t, s, "true"); rep.Status != api.StatusOK {
		t.Errorf("the session after its context's OOM kill: %+v", rep)
	}
}

// The call's end interrupts the code; the context keeps its state.
func TestCodeContextTimeoutInSession(t *testing.T) {
	needRoot(t)
	s := startSession(t, newHost(t), &api.Spec{})
	c := newCodeContext(t, s)
	runCode(t, c, "import time\nx = 5")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ex, err := c.Run(ctx, "time.sleep(60)", nil, nil)
	if err != nil || ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" {
		t.Fatalf("%+v %v", ex, err)
	}
	if ex := runCode(t, c, "x"); resultOf(ex) != "5" || ex.Restarted {
		t.Errorf("%+v", ex)
	}
}

// Two contexts of a session are two processes: one's state and death are
// not the other's.
func TestCodeContextsInSessionAreIndependent(t *testing.T) {
	needRoot(t)
	s := startSession(t, newHost(t), &api.Spec{})
	a, b := newCodeContext(t, s), newCodeContext(t, s)
	runCode(t, a, "import os\nv = os.getpid()")
	runCode(t, b, "import os\nv = os.getpid()")
	if pa, pb := resultOf(runCode(t, a, "v")), resultOf(runCode(t, b, "v")); pa == pb {
		t.Errorf("both contexts are process %s", pa)
	}
	if ex := runCode(t, a, "os._exit(2)"); ex.Error == nil || ex.Error.Name != codecontext.ErrorContextDied || ex.Error.Value != "exited with code 2" {
		t.Errorf("%+v %+v", ex, ex.Error)
	}
	if ex := runCode(t, b, "v == os.getpid()"); resultOf(ex) != "True" || ex.Restarted {
		t.Errorf("%+v", ex)
	}
}

// A context whose session ends answers so, running or not.
func TestCodeContextSessionEnds(t *testing.T) {
	needRoot(t)
	h := newHost(t)
	s, err := h.StartSession(context.Background(), &api.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	c := newCodeContext(t, s)
	runCode(t, c, "import time")
	ran := make(chan error, 1)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		_, err := c.Run(context.Background(), "print('go', flush=True)\ntime.sleep(60)",
			func(string) { once.Do(func() { close(started) }) }, nil)
		ran <- err
	}()
	<-started
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; !errors.Is(err, isolate.ErrSessionEnded) {
		t.Errorf("the running call: %v", err)
	}
	if _, err := c.Run(context.Background(), "1", nil, nil); !errors.Is(err, isolate.ErrSessionEnded) {
		t.Errorf("a call after the end: %v", err)
	}
}

// The latency of a call that does nothing much: run_code("1+1") in a live
// session, as its median.
func BenchmarkCodeContextRun(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	h, err := isolate.NewHost(&isolate.Config{BoxRoot: isolate.DefaultBoxRoot, NumBoxes: isolate.DefaultNumBoxes})
	if err != nil {
		b.Fatal(err)
	}
	s, err := h.StartSession(context.Background(), &api.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c := newCodeContext(b, s)
	runCode(b, c, "1+1")
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		ex := runCode(b, c, "1+1")
		took = append(took, time.Since(t0))
		if resultOf(ex) != "2" {
			b.Fatalf("%+v", ex)
		}
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "median-us")
}

// display() and the last expression's value come back in every format the
// object offers; figures need matplotlib, and are tested where it is.
func TestCodeContextRichResults(t *testing.T) {
	needRoot(t)
	s := startSession(t, newHost(t), &api.Spec{})
	c := newCodeContext(t, s)
	runCode(t, c, `class Pic:
    def __repr__(self): return "Pic()"
    def _repr_html_(self): return "<b>pic</b>"
    def _repr_png_(self): return b"\x89PNG fake"
    def _repr_json_(self): return {"a": [1, 2]}
    def _repr_latex_(self): return ("$x$", {})
class Broken:
    def _repr_html_(self): raise ValueError("no")
    def __repr__(self): return "Broken()"`)
	var streamed []codecontext.Result
	ctx := codecontext.WithResultHandler(context.Background(), func(r codecontext.Result) { streamed = append(streamed, r) })
	ex, err := c.Run(ctx, "print('before')\ndisplay(Broken(), 'text')\nPic()", nil, nil)
	if err != nil || ex.Error != nil || resultOf(ex) != "Pic()" || ex.Stdout != "before\n" || len(ex.Results) != 3 {
		t.Fatalf("%+v %v", ex, err)
	}
	if r := ex.Results[0]; r.Text != "Broken()" || r.HTML != "" || r.IsMainResult {
		t.Errorf("a display whose html raises: %+v", r)
	}
	if r := ex.Results[1]; r.Text != "'text'" || r.IsMainResult {
		t.Errorf("a displayed string: %+v", r)
	}
	r := ex.Results[2]
	if r.Text != "Pic()" || r.HTML != "<b>pic</b>" || r.PNG != "iVBORyBmYWtl" || string(r.JSON) != `{"a": [1, 2]}` || r.LaTeX != "$x$" || !r.IsMainResult {
		t.Errorf("the value: %+v (json %s)", r, r.JSON)
	}
	if len(streamed) != 3 || streamed[2].HTML != r.HTML {
		t.Errorf("streamed: %+v", streamed)
	}
	if ex := runCode(t, c, "x = Pic()"); len(ex.Results) != 0 {
		t.Errorf("no expression: %+v", ex.Results)
	}
	if ex := runCode(t, c, "Pic"); len(ex.Results) != 1 || ex.Results[0].HTML != "" {
		t.Errorf("the class, not an instance: %+v", ex.Results)
	}
}

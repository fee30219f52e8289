package codecontext

// The code context and its driver over a plain process (no root, no box):
// the protocol, state, output, errors, interrupts and deaths. The same in a
// real session is in session_codecontext_test.go.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/internal/headtail"
)

// execProcess is a driver run by os/exec in its own process group.
type execProcess struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	once   sync.Once
	report *api.Report
}

func (p *execProcess) Signal(sig syscall.Signal) error {
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (p *execProcess) Wait() *api.Report {
	p.once.Do(func() {
		err := p.cmd.Wait()
		r := &api.Report{Status: api.StatusOK, Stderr: p.stderr.String()}
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Status, r.Signal = api.StatusSG, int(ws.Signal())
		} else if err != nil {
			r.Status, r.ExitCode = api.StatusRE, p.cmd.ProcessState.ExitCode()
		}
		p.report = r
	})
	return p.report
}

func execStarter(t *testing.T) codeStarter {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3")
	}
	return func(args []string, stdin, stdout *os.File) (Process, error) {
		p := &execProcess{cmd: exec.Command(args[0], args[1:]...)}
		p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = stdin, stdout, &p.stderr
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := p.cmd.Start(); err != nil {
			return nil, err
		}
		return p, nil
	}
}

func newPlainContext(t *testing.T, outputLimit int64) *CodeContext {
	t.Helper()
	c, err := New("python", outputLimit, nil, execStarter(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func runCode(t *testing.T, c *CodeContext, code string) *Execution {
	t.Helper()
	ex, err := c.Run(context.Background(), code, nil, nil)
	if err != nil {
		t.Fatalf("%q: %v", code, err)
	}
	return ex
}

func resultOf(ex *Execution) string {
	if ex.Result == nil {
		return "<none>"
	}
	return *ex.Result
}

func TestCodeContextKeepsState(t *testing.T) {
	c := newPlainContext(t, 0)
	cases := []struct{ code, result string }{
		{"x = 1", "<none>"},
		{"x + 1", "2"},
		{"import math\ndef f(n):\n    return math.factorial(n)", "<none>"},
		{"f(5)", "120"},
		{`"a"`, "'a'"},
		{"None", "<none>"},
		{"_", "'a'"}, // the last value, as a notebook keeps it
		{"[x] * 2", "[1, 1]"},
	}
	for i, tc := range cases {
		ex := runCode(t, c, tc.code)
		if ex.Error != nil || resultOf(ex) != tc.result || ex.ExecutionCount != i+1 || ex.Restarted {
			t.Errorf("%q: %+v (result %s, error %+v), want result %s, count %d", tc.code, ex, resultOf(ex), ex.Error, tc.result, i+1)
		}
	}
}

func TestCodeContextStreamsOutput(t *testing.T) {
	c := newPlainContext(t, 0)
	var mu sync.Mutex
	var out, errOut []string
	// The code's own prints, and what a child process writes to fds 1
	// and 2, in order per stream.
	code := "import os, sys\nprint('one')\nsys.stdout.flush()\nos.system('echo two; echo err >&2')\nprint('é', file=sys.stderr)\n7"
	ex, err := c.Run(context.Background(), code,
		func(s string) { mu.Lock(); out = append(out, s); mu.Unlock() },
		func(s string) { mu.Lock(); errOut = append(errOut, s); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	if ex.Stdout != "one\ntwo\n" || ex.Stderr != "err\né\n" || resultOf(ex) != "7" {
		t.Errorf("stdout %q stderr %q result %s", ex.Stdout, ex.Stderr, resultOf(ex))
	}
	if strings.Join(out, "") != ex.Stdout || strings.Join(errOut, "") != ex.Stderr {
		t.Errorf("streamed %q and %q, kept %q and %q", out, errOut, ex.Stdout, ex.Stderr)
	}
}

func TestCodeContextErrors(t *testing.T) {
	c := newPlainContext(t, 0)
	ex := runCode(t, c, "def f():\n    raise ValueError('bad value')\nprint('before')\nf()")
	if ex.Error == nil || ex.Error.Name != "ValueError" || ex.Error.Value != "bad value" || ex.Stdout != "before\n" {
		t.Fatalf("%+v %+v", ex, ex.Error)
	}
	tb := ex.Error.Traceback
	if !strings.HasPrefix(tb, "Traceback (most recent call last):\n") || !strings.Contains(tb, "<cell 1>\", line 4") ||
		!strings.Contains(tb, "raise ValueError('bad value')") || strings.Contains(tb, "<string>") ||
		!strings.HasSuffix(tb, "ValueError: bad value\n") {
		t.Errorf("traceback:\n%s", tb)
	}
	ex = runCode(t, c, "1 +")
	if ex.Error == nil || ex.Error.Name != "SyntaxError" || strings.Contains(ex.Error.Traceback, "Traceback") || ex.ExecutionCount != 2 {
		t.Errorf("%+v %+v", ex, ex.Error)
	}
	// An exception is the code's, not the context's: it lives on.
	if ex = runCode(t, c, "raise SystemExit(3)"); ex.Error == nil || ex.Error.Name != "SystemExit" {
		t.Errorf("%+v", ex)
	}
	if ex = runCode(t, c, "f.__name__"); resultOf(ex) != "'f'" || ex.Restarted {
		t.Errorf("%+v", ex)
	}
	// Code that closes its fd 1 loses its output, not its context; the
	// driver's reader of the stream ends at its end (it does not spin).
	ex = runCode(t, c, "import os, threading\npump = [t for t in threading.enumerate() if t.name == 'stdout-pump'][0]\nos.close(1)\npump.join(30)\npump.is_alive()")
	if resultOf(ex) != "False" || ex.Error != nil || ex.Restarted {
		t.Errorf("%+v %+v", ex, ex.Error)
	}
}

func TestCodeContextDeathRestarts(t *testing.T) {
	c := newPlainContext(t, 0)
	for _, tc := range []struct{ code, why string }{
		{"import os; print('last'); os._exit(3)", "exited with code 3"},
		{"import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "killed by signal 9 (killed)"},
	} {
		runCode(t, c, "x = 1")
		ex := runCode(t, c, tc.code)
		if ex.Error == nil || ex.Error.Name != ErrorContextDied || ex.Error.Value != tc.why {
			t.Errorf("%q: %+v %+v, want ContextDied %q", tc.code, ex, ex.Error, tc.why)
		}
		ex = runCode(t, c, "'x' in dir()")
		if !ex.Restarted || ex.ExecutionCount != 1 || resultOf(ex) != "False" {
			t.Errorf("after %q: %+v, want a fresh context", tc.code, ex)
		}
		if ex = runCode(t, c, "1"); ex.Restarted || ex.ExecutionCount != 2 {
			t.Errorf("%+v", ex)
		}
	}
}

// What the code forks neither answers for the context nor holds up the
// news of its death.
func TestCodeContextForks(t *testing.T) {
	c := newPlainContext(t, 0)
	if ex := runCode(t, c, "import os, time\npid = os.fork()\npid > 0"); resultOf(ex) != "True" || ex.Error != nil {
		t.Fatalf("%+v", ex)
	}
	if ex := runCode(t, c, "os.waitpid(pid, 0)[1]"); resultOf(ex) != "0" || ex.ExecutionCount != 2 {
		t.Fatalf("the forked child: %+v", ex)
	}
	ex := runCode(t, c, "if os.fork() == 0:\n    time.sleep(60)\n    os._exit(0)\nos._exit(5)")
	if ex.Error == nil || ex.Error.Name != ErrorContextDied || ex.Error.Value != "exited with code 5" {
		t.Fatalf("%+v %+v", ex, ex.Error)
	}
}

func TestCodeContextInterruptedAtTheCallsEnd(t *testing.T) {
	c := newPlainContext(t, 0)
	runCode(t, c, "import time\nx = 41")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	ex, err := c.Run(ctx, "print('started', flush=True)\ntime.sleep(60)", nil, nil)
	if err != nil || ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" || ex.Stdout != "started\n" {
		t.Fatalf("%+v %+v %v", ex, ex.Error, err)
	}
	if ex = runCode(t, c, "x + 1"); resultOf(ex) != "42" || ex.Restarted {
		t.Errorf("the context did not survive the interrupt: %+v", ex)
	}
	// An interrupt that comes before the code runs is sent again until
	// the code takes it.
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Microsecond)
		ex, err := c.Run(ctx, "time.sleep(60)", nil, nil)
		cancel()
		if err != nil || ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" {
			t.Fatalf("%+v %+v %v", ex, ex.Error, err)
		}
	}
	// Code that ignores the interrupt is killed with its context.
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	ex, err = c.Run(ctx, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)", nil, nil)
	if err != nil || ex.Error == nil || ex.Error.Name != ErrorContextDied || !strings.Contains(ex.Error.Value, "did not stop") {
		t.Fatalf("%+v %+v %v", ex, ex.Error, err)
	}
	if ex = runCode(t, c, "'x' in dir()"); resultOf(ex) != "False" || !ex.Restarted {
		t.Errorf("%+v", ex)
	}
}

func TestCodeContextBoundsOutputAndResult(t *testing.T) {
	c := newPlainContext(t, 1000)
	ex := runCode(t, c, "import sys\nprint('é' * 3000)\nsys.stderr.write('e' * 5000)\n'r' * (3 << 20)")
	// The head and the tail of each stream, not splitting a character,
	// the bytes cut between them counted.
	if want := strings.Repeat("é", 250) + headtail.CutMarker(6001-500-499) + strings.Repeat("é", 249) + "\n"; ex.Stdout != want {
		t.Errorf("stdout kept %d bytes: %q", len(ex.Stdout), ex.Stdout)
	}
	if want := strings.Repeat("e", 500) + headtail.CutMarker(4000) + strings.Repeat("e", 500); ex.Stderr != want || !ex.Truncated {
		t.Errorf("stderr kept %d bytes (truncated %v)", len(ex.Stderr), ex.Truncated)
	}
	r := resultOf(ex)
	if len(r) > maxTextBytes+8 || !strings.HasPrefix(r, "'rrr") || !strings.HasSuffix(r, "...") {
		t.Errorf("a result of %d bytes kept (%.10q)", len(r), r)
	}
	// The bound is per call.
	if ex = runCode(t, c, "print('next')"); ex.Stdout != "next\n" || ex.Truncated {
		t.Errorf("%+v", ex)
	}
}

// Each language's context keeps the head and the tail of a long output,
// the cut marked, and gives the callbacks all of it.
func TestCodeContextOutputHeadAndTail(t *testing.T) {
	codes := map[string]string{
		"python":     "for i in range(3000): print(i)",
		"javascript": "for (let i = 0; i < 3000; i++) console.log(i)",
		"bash":       "for ((i = 0; i < 3000; i++)); do echo $i; done",
	}
	var all strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&all, "%d\n", i)
	}
	want := all.String()[:500] + headtail.CutMarker(int64(all.Len()-1000)) + all.String()[all.Len()-500:]
	for lang, code := range codes {
		if _, err := exec.LookPath(driverArgsProgram(lang)); err != nil {
			t.Logf("%s: no %s here", lang, driverArgsProgram(lang))
			continue
		}
		c, err := New(lang, 1000, nil, execStarter(t))
		if err != nil {
			t.Fatal(err)
		}
		var streamed strings.Builder
		ex, err := c.Run(context.Background(), code, func(s string) { streamed.WriteString(s) }, nil)
		if err != nil || ex.Stdout != want || !ex.Truncated || ex.Error != nil {
			t.Errorf("%s: %v truncated %v error %+v, stdout %q", lang, err, ex.Truncated, ex.Error, ex.Stdout)
		}
		if streamed.String() != all.String() {
			t.Errorf("%s: the callback got %d bytes, want all %d", lang, streamed.Len(), all.Len())
		}
		// Not streamed (Bash: sent at the end, its middle left out).
		if ex, err := c.Run(context.Background(), code, nil, nil); err != nil || ex.Stdout != want || !ex.Truncated {
			t.Errorf("%s, not streamed: %v truncated %v, stdout %q", lang, err, ex.Truncated, ex.Stdout)
		}
		c.Close()
	}
}

// A Bash context's output comes to the callbacks as the code writes it:
// the code goes on only once the test has seen its first line.
func TestCodeContextBashStreams(t *testing.T) {
	c, err := New("bash", 0, nil, execStarter(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := filepath.Join(t.TempDir(), "seen")
	code := "echo first; echo warn >&2\nfor ((i = 0; i < 600; i++)); do [[ -e " + seen + " ]] && break; sleep 0.1; done\necho second"
	var mu sync.Mutex
	var out, errs []string
	ex, err := c.Run(context.Background(), code, func(s string) {
		mu.Lock()
		defer mu.Unlock()
		if out = append(out, s); s == "first\n" {
			os.WriteFile(seen, nil, 0o644)
		}
	}, func(s string) { mu.Lock(); errs = append(errs, s); mu.Unlock() })
	if err != nil || ex.Stdout != "first\nsecond\n" || ex.Stderr != "warn\n" || ex.Error != nil {
		t.Fatalf("%+v %v", ex, err)
	}
	if strings.Join(out, "|") != "first\n|second\n" || strings.Join(errs, "") != "warn\n" {
		t.Errorf("streamed %q and %q, want the first line alone first", out, errs)
	}
	// The state and an error status, streamed or not.
	if ex, err := c.Run(context.Background(), "X=7; false", func(string) {}, nil); err != nil || ex.Error == nil || ex.Error.Name != "ExitStatus" {
		t.Errorf("%+v %v", ex, err)
	}
	if ex := runCode(t, c, "echo $X"); ex.Stdout != "7\n" {
		t.Errorf("%+v", ex)
	}
}

func driverArgsProgram(lang string) string {
	_, program := driverArgs(lang)
	return program
}

func TestCodeContextsAreIndependent(t *testing.T) {
	a, b := newPlainContext(t, 0), newPlainContext(t, 0)
	runCode(t, a, "x = 'a'")
	runCode(t, b, "x = 'b'")
	if ra, rb := resultOf(runCode(t, a, "x")), resultOf(runCode(t, b, "x")); ra != "'a'" || rb != "'b'" {
		t.Errorf("%s %s", ra, rb)
	}
	runCode(t, a, "import os; os._exit(1)")
	if ex := runCode(t, b, "x"); resultOf(ex) != "'b'" || ex.Restarted {
		t.Errorf("%+v", ex)
	}
}

// An image without a working python3 is one error at the context's start,
// with what the interpreter said last.
func TestCodeContextStartFailure(t *testing.T) {
	start := execStarter(t)
	noPython := func(args []string, stdin, stdout *os.File) (Process, error) {
		return start([]string{"sh", "-c", "echo 'python3: not found' >&2; exit 127"}, stdin, stdout)
	}
	_, err := New("python", 0, nil, noPython)
	if err == nil || err.Error() != "python3 in the session did not start: exited with code 127: python3: not found" {
		t.Errorf("%v", err)
	}
}

func TestCodeContextRefusesOtherLanguages(t *testing.T) {
	_, err := New("cobol", 0, nil, execStarter(t))
	var fe *api.FieldError
	if !errors.As(err, &fe) || fe.Field != "language" {
		t.Errorf("%v", err)
	}
}

// Close does not wait for a running call: the call answers that the
// context is closed.
func TestCodeContextClosedWhileRunning(t *testing.T) {
	c := newPlainContext(t, 0)
	started := make(chan struct{})
	var once sync.Once
	ran := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background(), "import time\nprint('go', flush=True)\ntime.sleep(60)",
			func(string) { once.Do(func() { close(started) }) }, nil)
		ran <- err
	}()
	<-started
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; !errors.Is(err, ErrContextClosed) {
		t.Errorf("the running call: %v", err)
	}
}

func TestCodeContextClosed(t *testing.T) {
	c := newPlainContext(t, 0)
	runCode(t, c, "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(context.Background(), "1", nil, nil); err == nil {
		t.Error("a closed context ran code")
	}
}

// A call's answer is fenced by its nonce: code that writes a "done" frame
// of its own onto the driver's channel cannot end its call with it, and
// code that finds the call's nonce and ends its call early leaves the
// rest of that call's frames behind: the next call gets its own answer.
func TestCodeContextForgedFramesDoNotShiftAnswers(t *testing.T) {
	c := newPlainContext(t, 0)
	forge := `import json, os, struct, sys
m = sys.modules["__main__"]
def frame(kind, payload):
    os.write(m.chan.fileno(), kind + struct.pack(">I", len(payload)) + payload)
`
	ex := runCode(t, c, forge+`frame(b"d", json.dumps({"execution_count": 99}).encode())
print("genuine")`)
	if ex.ExecutionCount != 1 || ex.Stdout != "genuine\n" {
		t.Errorf("a forged end without the nonce ended the call: %+v", ex)
	}
	if ex := runCode(t, c, "40 + 2"); resultOf(ex) != "42" || ex.ExecutionCount != 2 {
		t.Errorf("the call after: %+v", ex)
	}
	ex = runCode(t, c, forge+`frame(b"d", json.dumps({"execution_count": 77, "nonce": m.nonce}).encode())
import time
time.sleep(0.3)
print("late")
"late result"`)
	if ex.ExecutionCount != 77 {
		t.Errorf("the code ending its own call with its nonce: %+v", ex)
	}
	ex = runCode(t, c, "6 * 7")
	if resultOf(ex) != "42" || ex.ExecutionCount != 4 || ex.Stdout != "" {
		t.Errorf("the call after an early end: %s, %+v; want its own answer", resultOf(ex), ex)
	}
}

// A rich result is at most 8 MiB of JSON, its largest formats left out
// first; a call's results together at most 64 MiB, those beyond dropped.
func TestCodeContextBoundsRichResults(t *testing.T) {
	c := newPlainContext(t, 1000)
	ex := runCode(t, c, `class Big:
    def __init__(self, i): self.i = i
    def __repr__(self): return 'Big(%d)' % self.i
    def _repr_html_(self): return 'h' * (9 << 20)
    def _repr_markdown_(self): return 'small'
display(Big(0))
class Large:
    def __init__(self, i): self.i = i
    def __repr__(self): return 'Large(%d)' % self.i
    def _repr_html_(self): return 'h' * (7 << 20)
for i in range(12):
    display(Large(i))
`)
	if len(ex.Results) == 0 || ex.Results[0].HTML != "" || ex.Results[0].Markdown != "small" || ex.Results[0].Text != "Big(0)" {
		t.Fatalf("a result over 8 MiB kept as %d results, the first %.60q", len(ex.Results), fmt.Sprint(ex.Results[:min(1, len(ex.Results))]))
	}
	large := ex.Results[1:]
	// 7 MiB each (and a little JSON): 9 fit in 64 MiB with the first.
	if len(large) != 9 {
		t.Errorf("%d results of 7 MiB kept, want 9 within 64 MiB", len(large))
	}
	for i, r := range large {
		if r.Text != fmt.Sprintf("Large(%d)", i) || len(r.HTML) != 7<<20 {
			t.Errorf("result %d: %q, %d bytes of HTML", i+1, r.Text, len(r.HTML))
		}
	}
}

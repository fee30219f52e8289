package handover

// The transport, end to end: the real isolate binary (its C client runs
// from the binary's entry point on x86-64, else from an ELF constructor)
// against a Server in this process whose
// Runner is the test's. No root needed: no box is started here (the
// CLI suite runs every real run through the real service, see
// cmd/isolate/harness_test.go with ISOLATE_TEST_VIA=service).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/internal/testbin"
)

// isolateBin is the isolate binary built for these tests, and its build id.
var isolateBin, isolateBuild string

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "handover-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		isolateBin = filepath.Join(dir, "isolate")
		if err := testbin.Build(isolateBin, "../../cmd/isolate"); err != nil {
			fmt.Fprintln(os.Stderr, "build isolate:", err)
			return 1
		}
		if isolateBuild, err = BuildID(isolateBin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// startServer serves handovers with run on a fresh socket until the test
// ends, and returns the socket's path.
func startServer(t *testing.T, build string, run Runner, outcome func(string)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cli.sock")
	serveOn(t, NewServer(build, run, outcome), sock)
	return sock
}

// serveOn serves handovers with s on a fresh socket at sock until the
// test ends.
func serveOn(t *testing.T, s *Server, sock string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Shutdown(5 * time.Second)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// cli is the isolate binary pointed at sock, in dir.
func cli(sock, dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(isolateBin, args...)
	cmd.Env = cliEnv(sock)
	cmd.Dir = dir
	return cmd
}

// cliEnv is the environment of an isolate pointed at sock: no other
// ISOLATE_ variable of the test's (scripts/test.sh sets some) may keep it
// in-process.
func cliEnv(sock string) []string {
	env := []string{"ISOLATE_SERVICE_SOCKET=" + sock}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ISOLATE_") {
			env = append(env, kv)
		}
	}
	return env
}

// await waits for the runner to say it started, or fails the test after
// a generous deadline: a run that never reached the runner (it ran
// in-process) must not hang the suite.
func await(t *testing.T, started <-chan struct{}, cmd *exec.Cmd) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the invocation never reached the service")
	}
}

// exitOf is how cmd ended: its exit status, or the signal it died of.
func exitOf(t *testing.T, err error) (code int, sig syscall.Signal) {
	t.Helper()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if ee == nil {
		return 0, 0
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return -1, ws.Signal()
	}
	return ws.ExitStatus(), 0
}

// seen is what the echo runner saw of an invocation.
type seen struct {
	Args     []string
	Dir      string
	DirFile  string // where the O_PATH descriptor points
	Env      []string
	UID, GID int
	Groups   []int
	Stdin    string
}

// echoRunner writes what it was handed as JSON on the caller's stdout,
// a line on its stderr, and exits 3.
func echoRunner(_ context.Context, inv *Invocation) Exit {
	in := make([]byte, 100)
	n, _ := inv.Stdin.Read(in)
	target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", inv.DirFile.Fd()))
	json.NewEncoder(inv.Stdout).Encode(seen{
		Args: inv.Args, Dir: inv.Dir, DirFile: target, Env: inv.Env,
		UID: inv.Caller.UID, GID: inv.Caller.GID, Groups: inv.Caller.Groups, Stdin: string(in[:n]),
	})
	inv.Stderr.WriteString("to stderr\n")
	return Exit{Code: 3}
}

// echoed runs cmd against echoRunner and returns what the runner saw.
func echoed(t *testing.T, cmd *exec.Cmd) seen {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout = &out
	if code, sig := exitOf(t, cmd.Run()); code != 3 || sig != 0 {
		t.Fatalf("exit %d signal %v, want 3 (the runner's)", code, sig)
	}
	var got seen
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("stdout of %d bytes: %v", out.Len(), err)
	}
	return got
}

func TestHandoverCarriesTheInvocation(t *testing.T) {
	outcomes := make(chan string, 1)
	sock := startServer(t, isolateBuild, echoRunner, func(o string) { outcomes <- o })
	dir := t.TempDir()
	cmd := cli(sock, dir, "run", "-t", "1", "--", "/bin/echo", "a b")
	cmd.Env = append(cmd.Env, "SOME_VAR=x")
	cmd.Stdin = strings.NewReader("input") // a pipe
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code, sig := exitOf(t, cmd.Run())
	if code != 3 || sig != 0 {
		t.Fatalf("exit %d signal %v, want 3 (the runner's)\nstderr: %s", code, sig, errb.String())
	}
	var got seen
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("stdout %q: %v", out.String(), err)
	}
	wantArgs := []string{isolateBin, "run", "-t", "1", "--", "/bin/echo", "a b"}
	if strings.Join(got.Args, "\x00") != strings.Join(wantArgs, "\x00") {
		t.Errorf("args %q, want %q", got.Args, wantArgs)
	}
	if got.Dir != dir || got.DirFile != dir {
		t.Errorf("dir %q (descriptor: %q), want %q", got.Dir, got.DirFile, dir)
	}
	if !slicesContain(got.Env, "SOME_VAR=x") {
		t.Errorf("env %q lacks SOME_VAR=x", got.Env)
	}
	if got.UID != os.Geteuid() || got.GID != os.Getegid() {
		t.Errorf("caller %d:%d, want %d:%d", got.UID, got.GID, os.Geteuid(), os.Getegid())
	}
	own, _ := os.Getgroups()
	if fmt.Sprint(got.Groups) != fmt.Sprint(own) && !(len(own) == 0 && len(got.Groups) == 0) {
		t.Errorf("groups %v, want %v", got.Groups, own)
	}
	if got.Stdin != "input" {
		t.Errorf("stdin %q, want %q", got.Stdin, "input")
	}
	if errb.String() != "to stderr\n" {
		t.Errorf("stderr %q", errb.String())
	}
	if o := <-outcomes; o != OutcomeCompleted {
		t.Errorf("outcome %q, want %q", o, OutcomeCompleted)
	}
}

// A request far larger than the socket's buffer (an environment of 1.2
// MB, which the CLI sends straight from where the kernel laid it out)
// arrives whole.
func TestLargeRequest(t *testing.T) {
	sock := startServer(t, isolateBuild, echoRunner, nil)
	cmd := cli(sock, t.TempDir(), "run", "--", "/bin/true")
	var want []string
	for i := 0; i < 12; i++ {
		want = append(want, fmt.Sprintf("BIG%d=%s", i, strings.Repeat(string(rune('a'+i)), 100<<10)))
	}
	cmd.Env = append(cmd.Env, want...)
	got := echoed(t, cmd)
	for _, kv := range want {
		if !slicesContain(got.Env, kv) {
			t.Fatalf("%.8s... (%d bytes) did not arrive whole", kv, len(kv))
		}
	}
}

// A working directory longer than the client's first buffer for it (256
// bytes) arrives whole: the client reads it again into one of PATH_MAX.
func TestLongWorkingDirectory(t *testing.T) {
	sock := startServer(t, isolateBuild, echoRunner, nil)
	dir := t.TempDir()
	for len(dir) <= 600 {
		dir = filepath.Join(dir, strings.Repeat("d", 100))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	got := echoed(t, cli(sock, dir, "run", "--", "/bin/true"))
	if got.Dir != dir || got.DirFile != dir {
		t.Errorf("dir %q (descriptor: %q), want %q", got.Dir, got.DirFile, dir)
	}
}

// On x86-64 the client runs from the binary's entry point, before the C
// library starts: a handed-over CLI touches five pages or so (its code,
// its strings, its program headers, the stack the kernel made), where the
// C library's start-up alone touches eight more, each a page fault of
// 20-60 us on a guest without hardware-assisted paging. Counted here while the run is the
// service's (/proc/PID/stat's minflt): from the constructor it was 14.
func TestHandoverBeforeTheCLibrary(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the entry point is x86-64's; elsewhere the constructor hands over")
	}
	// The fewest of three: a count taken while other tests start
	// processes at once runs higher (57 seen), never lower.
	fewest := -1
	for range 3 {
		minflt := handedOverPageFaults(t)
		if fewest < 0 || minflt < fewest {
			fewest = minflt
		}
		if fewest <= 10 {
			return
		}
	}
	t.Errorf("the handed-over CLI took %d page faults, want at most 10: did the C library start?", fewest)
}

// handedOverPageFaults runs a handed-over CLI and counts its page faults
// while the run is the service's.
func handedOverPageFaults(t *testing.T) int {
	t.Helper()
	started, release := make(chan struct{}), make(chan struct{})
	sock := startServer(t, isolateBuild, func(ctx context.Context, inv *Invocation) Exit {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return Exit{}
	}, nil)
	cmd := cli(sock, t.TempDir(), "run", "--", "/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	await(t, started, cmd)
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	close(release)
	if code, sig := exitOf(t, cmd.Wait()); code != 0 || sig != 0 {
		t.Errorf("exit %d signal %v, want 0", code, sig)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's name (which may hold anything): state
	// first, minflt the 8th (field 10 of proc(5)).
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	minflt, err := strconv.Atoi(fields[7])
	if err != nil {
		t.Fatalf("%s: %v", stat, err)
	}
	return minflt
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Only runs are handed over, and only when the caller lets them be.
// (What stays in-process here creates nothing: help, versions, usage
// errors.)
func TestWhatIsNotHandedOver(t *testing.T) {
	handed := make(chan []string, 10)
	sock := startServer(t, isolateBuild, func(_ context.Context, inv *Invocation) Exit {
		handed <- inv.Args
		return Exit{Code: 0}
	}, nil)
	for _, c := range []struct {
		args []string
		env  []string
		want bool
	}{
		{[]string{"run", "--help"}, nil, true},
		{[]string{"exec", "--help"}, nil, true},
		{[]string{"-b", "not-a-number", "--run", "--", "/bin/true"}, nil, true},
		{[]string{"version"}, nil, false},
		{[]string{"langs"}, nil, false},
		{[]string{"-b", "not-a-number", "--init"}, nil, false},
		{[]string{"-b", "not-a-number", "--", "--run"}, nil, false},
		{[]string{"--version"}, nil, false},
		{[]string{"run", "--help"}, []string{"ISOLATE_NO_SERVICE=1"}, false},
		{[]string{"run", "--help"}, []string{"ISOLATE_NO_SERVICE="}, true},
		{[]string{"run", "--help"}, []string{"ISOLATE_CONFIG=/nonexistent"}, false},
		{[]string{"run", "--help"}, []string{"ISOLATE_IMAGES_DIR=/x"}, false},
	} {
		cmd := cli(sock, t.TempDir(), c.args...)
		cmd.Env = append(cmd.Env, c.env...)
		cmd.Stdout, cmd.Stderr = nil, nil
		cmd.Run()
		select {
		case args := <-handed:
			if !c.want {
				t.Errorf("%q with %q was handed over (%q)", c.args, c.env, args)
			}
		default:
			if c.want {
				t.Errorf("%q with %q was not handed over", c.args, c.env)
			}
		}
	}
}

// A service of another build declines: the CLI runs the invocation
// itself (here: prints run's help, and exits 0).
func TestOtherBuildIsDeclined(t *testing.T) {
	outcomes := make(chan string, 1)
	sock := startServer(t, "another-build", func(context.Context, *Invocation) Exit {
		t.Error("a declined invocation ran in the service")
		return Exit{Code: 9}
	}, func(o string) { outcomes <- o })
	expectHelpInProcess(t, sock)
	if o := <-outcomes; o != OutcomeDeclined {
		t.Errorf("outcome %q, want %q", o, OutcomeDeclined)
	}
}

// Signals to the CLI reach the runner; the CLI ends as the runner says,
// by a signal too.
func TestSignalsAreRelayed(t *testing.T) {
	started := make(chan struct{}, 1)
	sock := startServer(t, isolateBuild, func(ctx context.Context, inv *Invocation) Exit {
		started <- struct{}{}
		select {
		case sig := <-inv.Signals:
			if sig == syscall.SIGQUIT {
				return Exit{Code: 128 + int(sig)}
			}
			return Exit{Signal: sig}
		case <-ctx.Done():
			return Exit{Code: 99}
		}
	}, nil)
	for _, c := range []struct {
		sig      syscall.Signal
		code     int
		diedOfIt bool
	}{
		{syscall.SIGTERM, -1, true},
		{syscall.SIGINT, -1, true},
		{syscall.SIGHUP, -1, true},
		{syscall.SIGABRT, -1, true},
		{syscall.SIGQUIT, 131, false},
	} {
		cmd := cli(sock, t.TempDir(), "run", "--", "/bin/sleep", "100")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		await(t, started, cmd)
		cmd.Process.Signal(c.sig)
		code, sig := exitOf(t, cmd.Wait())
		if c.diedOfIt && sig != c.sig || !c.diedOfIt && (code != c.code || sig != 0) {
			t.Errorf("%v: exit %d signal %v", c.sig, code, sig)
		}
	}
}

// The caller's death cancels its run at once.
func TestCallerDeathCancelsTheRun(t *testing.T) {
	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	outcomes := make(chan string, 1)
	sock := startServer(t, isolateBuild, func(ctx context.Context, inv *Invocation) Exit {
		started <- struct{}{}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return Exit{Code: 2}
	}, func(o string) { outcomes <- o })
	cmd := cli(sock, t.TempDir(), "run", "--", "/bin/sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	await(t, started, cmd)
	cmd.Process.Kill()
	cmd.Wait()
	if err := <-cause; err != ErrCallerGone {
		t.Errorf("the run's context ended by %v, want %v", err, ErrCallerGone)
	}
	if o := <-outcomes; o != OutcomeCallerGone {
		t.Errorf("outcome %q, want %q", o, OutcomeCallerGone)
	}
}

// A service that ends without an exit (it died, or restarted) leaves
// the caller a clear XX in every form it asked for, never a hang.
func TestServiceEndedDuringTheRun(t *testing.T) {
	sock := startServer(t, isolateBuild, func(context.Context, *Invocation) Exit {
		// As if the service died here: the connection closes unanswered.
		runtime.Goexit()
		return Exit{}
	}, nil)
	dir := t.TempDir()
	for _, c := range []struct {
		args       []string
		wantStdout string
		meta       string
	}{
		{[]string{"run", "--", "/bin/true"}, "", ""},
		{[]string{"run", "--json", "--", "/bin/true"}, `{"status":"XX","message":"the service ended during the run"}` + "\n", ""},
		{[]string{"exec", "--json", "--lang", "c", "x.c"}, `{"status":"XX","message":"the service ended during the run"}` + "\n", ""},
		{[]string{"-b", "1", "-M", "meta1", "--run", "--", "/bin/true"}, "", "meta1"},
		{[]string{"-M", "meta2", "-b1", "--run", "--", "/bin/true"}, "", "meta2"},
		{[]string{"-svM", "meta3", "--run", "--", "/bin/true"}, "", "meta3"},
		{[]string{"--meta=meta4", "--run", "--", "/bin/true"}, "", "meta4"},
		{[]string{"--meta", "meta5", "--run", "--", "/bin/true"}, "", "meta5"},
		{[]string{"-Mmeta6", "--run", "--", "/bin/true"}, "", "meta6"},
		{[]string{"-M-", "--run", "--", "/bin/true"}, "status:XX\nmessage:the service ended during the run\n", ""},
		{[]string{"-E", "-M", "--run", "--", "/bin/true"}, "", ""},
	} {
		var out, errb bytes.Buffer
		cmd := cli(sock, dir, c.args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		code, sig := exitOf(t, cmd.Run())
		if code != 2 || sig != 0 || errb.String() != "isolate: the service ended during the run\n" || out.String() != c.wantStdout {
			t.Errorf("%q: exit %d signal %v, stdout %q, stderr %q", c.args, code, sig, out.String(), errb.String())
		}
		if c.meta != "" {
			meta, err := os.ReadFile(filepath.Join(dir, c.meta))
			if err != nil || string(meta) != "status:XX\nmessage:the service ended during the run\n" {
				t.Errorf("%q: meta file %q (%v)", c.args, meta, err)
			}
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "-*")); len(left) > 0 {
		t.Errorf("meta files written where none was asked for: %v", left)
	}
}

// A request that is not one is declined, and costs the service nothing.
func TestMalformedRequests(t *testing.T) {
	outcomes := make(chan string, 10)
	sock := startServer(t, isolateBuild, func(context.Context, *Invocation) Exit {
		t.Error("a malformed request ran")
		return Exit{}
	}, func(o string) { outcomes <- o })
	for _, payload := range [][]byte{
		[]byte("GET / HTTP/1.0\r\n\r\n"),
		encodeRequest(&request{build: isolateBuild, dir: "/", args: []string{"isolate", "run"}}), // no descriptors
	} {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(payload)
		ans := make([]byte, answerSize)
		if _, err := c.Read(ans); err != nil {
			t.Fatal(err)
		}
		if tag, _, _ := decodeAnswer(ans); tag != tagDeclined {
			t.Errorf("answer %q to %q, want declined", tag, payload)
		}
		c.Close()
		if o := <-outcomes; o != OutcomeBadRequest {
			t.Errorf("outcome %q", o)
		}
	}
}

// A caller whose CPU affinity is not the service's (taskset) runs
// in-process: its program must inherit that affinity.
func TestOtherCPUAffinityIsDeclined(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil || all.Count() < 2 {
		t.Skip("one CPU: no other affinity to give the CLI")
	}
	outcomes := make(chan string, 2)
	sock := startServer(t, isolateBuild, func(context.Context, *Invocation) Exit { return Exit{Code: 7} },
		func(o string) { outcomes <- o })
	var one unix.CPUSet
	for c := 0; ; c++ {
		if all.IsSet(c) {
			one.Set(c)
			break
		}
	}
	for _, c := range []struct {
		set     *unix.CPUSet
		code    int
		outcome string
	}{{&all, 7, OutcomeCompleted}, {&one, 0, OutcomeDeclined}} {
		cmd := cli(sock, t.TempDir(), "run", "--help")
		runtime.LockOSThread()
		unix.SchedSetaffinity(0, c.set)
		err := cmd.Start()
		unix.SchedSetaffinity(0, &all)
		runtime.UnlockOSThread()
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := exitOf(t, cmd.Wait()); code != c.code {
			t.Errorf("CPUs %d: exit %d, want %d", c.set.Count(), code, c.code)
		}
		if o := <-outcomes; o != c.outcome {
			t.Errorf("CPUs %d: outcome %q, want %q", c.set.Count(), o, c.outcome)
		}
	}
}

// A caller whose umask is not the service's runs in-process: the files
// its run creates (meta file, report, outputs) get its umask there.
func TestOtherUmaskIsDeclined(t *testing.T) {
	outcomes := make(chan string, 2)
	sock := startServer(t, isolateBuild, func(context.Context, *Invocation) Exit { return Exit{Code: 7} },
		func(o string) { outcomes <- o })
	for _, c := range []struct {
		umask   string
		code    int
		outcome string
	}{{ownUmask(), 7, OutcomeCompleted}, {"077", 0, OutcomeDeclined}} {
		cmd := exec.Command("/bin/sh", "-c", "umask "+c.umask+"; exec \"$0\" run --help", isolateBin)
		cmd.Env = cliEnv(sock)
		if code, _ := exitOf(t, cmd.Run()); code != c.code {
			t.Errorf("umask %s: exit %d, want %d", c.umask, code, c.code)
		}
		if o := <-outcomes; o != c.outcome {
			t.Errorf("umask %s: outcome %q, want %q", c.umask, o, c.outcome)
		}
	}
}

// A service that never answers is given up on (after seconds, not never):
// the CLI runs the invocation itself.
func TestSilentServiceIsGivenUpOn(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "cli.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held, unanswered, until the test ends
		}
	}()
	expectHelpInProcess(t, sock)
}

// expectHelpInProcess runs `isolate run --help` against sock and expects
// run's help, printed by the CLI itself (a service here never runs it).
func expectHelpInProcess(t *testing.T, sock string) {
	t.Helper()
	// Its stdout is a file: the descriptors the CLI sent may stay in an
	// unread socket, and a pipe would never reach EOF.
	stdout, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	cmd := cli(sock, t.TempDir(), "run", "--help")
	cmd.Stdout = stdout
	code, _ := exitOf(t, cmd.Run())
	out, _ := os.ReadFile(stdout.Name())
	if code != 0 || !strings.Contains(string(out), "--wall-time") {
		t.Fatalf("exit %d, stdout %q: want run's help, in-process", code, out)
	}
}

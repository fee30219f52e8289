package cmdline

// Main in one process as the service runs it: many at once, each with its
// own directory, pipes as standard streams, a caller's rights and relayed
// signals; its output compared with the isolate binary's for the same
// command line. Root tests drive the real kernel, as the binary does.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// isolateBin is the isolate binary, built for the comparisons.
var isolateBin string

func TestMain(m *testing.M) {
	// The runtime starts each box's init by re-executing this binary.
	boxinit.MaybeInit()
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	code := func() int {
		dir, err := os.MkdirTemp("", "cmdline-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		isolateBin = filepath.Join(dir, "isolate")
		build := exec.Command("go", "build", "-tags", "urfave_cli_no_docs,netgo,osusergo", "-o", isolateBin, "github.com/isolate-sandbox/isolate/cmd/isolate")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build isolate:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs boxes (namespaces, cgroups, mounts)")
	}
}

// outcome is how one invocation ended and what it printed.
type outcome struct {
	Exit           Exit
	Stdout, Stderr string
}

// mainWith runs Main on inv with pipes as its standard streams (stdin
// gives input) and collects its output.
func mainWith(t *testing.T, inv *Invocation, input string) outcome {
	t.Helper()
	var files []*os.File
	pipe := func() (r, w *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, r, w)
		return r, w
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	go func() {
		io.WriteString(inW, input)
		inW.Close()
	}()
	var out, errb bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { io.Copy(&out, outR); wg.Done() }()
	go func() { io.Copy(&errb, errR); wg.Done() }()
	inv.Stdin, inv.Stdout, inv.Stderr = inR, outW, errW
	if inv.Env == nil {
		inv.Env = os.Environ()
	}
	exit := Main(context.Background(), inv)
	outW.Close()
	errW.Close()
	wg.Wait()
	return outcome{Exit: exit, Stdout: out.String(), Stderr: errb.String()}
}

// binary runs the isolate binary with args in dir.
func binary(t *testing.T, dir, input string, args ...string) outcome {
	t.Helper()
	cmd := exec.Command(isolateBin, args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(input)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return outcome{Exit: Exit{Code: code}, Stdout: out.String(), Stderr: errb.String()}
}

// measured are the numbers no two runs share: times, memory, the box.
var measured = regexp.MustCompile(`(cpu|wall|mem|box|time|time-wall|max-rss|cg-mem|csw-voluntary|csw-forced)[=:][0-9.]+(KiB|s)?`)

func normalize(s string) string { return measured.ReplaceAllString(s, "$1=N") }

// TestConcurrentMains: Mains at once in one process, each from its own
// directory, with pipes as stdio: relative --stdin, --meta and --copy-out
// land in the invocation's directory, and each prints what the binary
// prints for the same command line there.
func TestConcurrentMains(t *testing.T) {
	needRoot(t)
	host, err := isolate.NewHost(nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
		if err := os.WriteFile(filepath.Join(dirs[i], "in.txt"), []byte(fmt.Sprintf("input of %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"isolate", "run", "--stdin", "in.txt", "--meta", "meta.txt", "--copy-out", "/box/out:out.txt", "-E", "WHO",
		"--", "/bin/sh", "-c", `tee /box/out; echo "to stderr $WHO" >&2`}
	got := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = mainWith(t, &Invocation{Args: args, Dir: dirs[i], Env: []string{fmt.Sprintf("WHO=caller%d", i)}, Host: host, Via: "service"}, "")
		}()
	}
	wg.Wait()
	for i, o := range got {
		want := fmt.Sprintf("input of %d\n", i)
		if o.Exit != (Exit{}) || o.Stdout != want || !strings.HasPrefix(o.Stderr, fmt.Sprintf("to stderr caller%d\nisolate: OK exit=0", i)) {
			t.Errorf("Main %d: %+v", i, o)
		}
		if data, err := os.ReadFile(filepath.Join(dirs[i], "out.txt")); err != nil || string(data) != want {
			t.Errorf("Main %d: out.txt %q (%v)", i, data, err)
		}
		if data, err := os.ReadFile(filepath.Join(dirs[i], "meta.txt")); err != nil || !strings.Contains(string(data), "exitcode:0\n") {
			t.Errorf("Main %d: meta.txt %q (%v)", i, data, err)
		}
	}
	// The binary, run in the first directory with the first caller's
	// environment, prints the same bytes but for what is measured.
	t.Setenv("WHO", "caller0")
	meta0, _ := os.ReadFile(filepath.Join(dirs[0], "meta.txt"))
	bin := binary(t, dirs[0], "", args[1:]...)
	if bin.Exit != got[0].Exit || bin.Stdout != got[0].Stdout || normalize(bin.Stderr) != normalize(got[0].Stderr) {
		t.Errorf("binary %+v, Main %+v", bin, got[0])
	}
	meta, _ := os.ReadFile(filepath.Join(dirs[0], "meta.txt"))
	if normalize(string(meta)) != normalize(string(meta0)) {
		t.Errorf("meta file: binary %q, Main %q", meta, meta0)
	}
}

// TestOutputSameAsBinary: usage errors, help, the ioi form's version, a
// run's output, byte for byte (but for what is measured). Not the
// app's help: without Register, the library knows run, exec and version
// only.
func TestOutputSameAsBinary(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"run", "--help"}, {"exec", "--help"}, {"version"}, {"--version"},
		{"run", "--mem", "NaN", "--", "/bin/true"}, {"run", "--stdin", "missing.txt", "--", "/bin/true"},
		{"bogus"}, {"--run"}, {"run", "--lang", "nosuchlang", "--", "x"},
		{"run", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"},
	} {
		bin := binary(t, dir, "", args...)
		m := mainWith(t, &Invocation{Args: append([]string{"isolate"}, args...), Dir: dir}, "")
		if bin.Exit != m.Exit || bin.Stdout != m.Stdout || normalize(bin.Stderr) != normalize(m.Stderr) {
			t.Errorf("%q:\nbinary %+v\nMain   %+v", args, bin, m)
		}
	}
}

// nobody is the unprivileged caller.
var nobody = &caller.Caller{Via: caller.Handover, UID: 65534, GID: 65534}

// TestCallerRights: a caller other than root gets nothing it could not
// open itself: each refusal is exit 2 with one line, before anything ran.
func TestCallerRights(t *testing.T) {
	needRoot(t)
	private := t.TempDir() // 0700, root's
	// Not a t.TempDir: their parent is root's.
	open, err := os.MkdirTemp("", "cmdline-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(open)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(open, "secret") // only root may read it
	if err := os.WriteFile(secret, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(opts ...string) []string {
		return append(append([]string{"isolate", "run"}, opts...), "--", "/bin/echo", "ran")
	}
	for _, c := range []struct {
		name    string
		args    []string
		created string // a file that must not appear
	}{
		{"stdin root can read", run("--stdin", secret), ""},
		{"meta in root's directory", run("--meta", filepath.Join(private, "meta")), filepath.Join(private, "meta")},
		{"report in root's directory", run("--report", "r.json"), ""},
		{"stdout in root's directory", run("--stdout", filepath.Join(private, "out")), filepath.Join(private, "out")},
		{"copy-in it cannot read", run("--copy-in", secret+":/box/s"), ""},
		{"bind of root's directory", run("--bind", private+":/mnt"), ""},
		{"copy-out into root's directory", run("--copy-out", "/box/x:"+filepath.Join(private, "x")), filepath.Join(private, "x")},
		{"exec of a source it cannot read", []string{"isolate", "exec", "--lang", "python", "secret"}, ""},
		{"seccomp profile it cannot read", run("--seccomp", secret), ""},
		{"image it cannot read", run("--image", private+"/"), ""},
	} {
		dir := open
		if c.name == "report in root's directory" {
			dir = private
		}
		o := mainWith(t, &Invocation{Args: c.args, Dir: dir, Caller: nobody, Via: "service"}, "")
		t.Logf("%s: %q", c.name, o.Stderr)
		if o.Exit.Code != 2 || strings.Contains(o.Stdout, "ran") || strings.Count(o.Stderr, "\n") != 1 || !strings.HasPrefix(o.Stderr, "isolate: ") {
			t.Errorf("%s: %+v, want exit 2, one line, the program not run", c.name, o)
		}
		if c.created != "" {
			if _, err := os.Lstat(c.created); err == nil {
				t.Errorf("%s: %s was created", c.name, c.created)
			}
		}
	}
	// What the caller may open, it gets: the same run from its own
	// directory.
	o := mainWith(t, &Invocation{Args: run("--meta", "m", "--stdout", "o"), Dir: open, Caller: nobody, Via: "service"}, "")
	if o.Exit.Code != 0 {
		t.Fatalf("run as nobody: %+v", o)
	}
	for _, name := range []string{"m", "o"} {
		fi, err := os.Stat(filepath.Join(open, name))
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65534 {
			t.Errorf("%s: not created as nobody (%v)", name, err)
		}
	}
}

// TestIOIFormIsRoots: persistent boxes are root's, through the service
// too.
func TestIOIFormIsRoots(t *testing.T) {
	needRoot(t)
	o := mainWith(t, &Invocation{Args: []string{"isolate", "-b", "761", "--run", "--", "/bin/true"}, Dir: "/", Caller: nobody, Via: "service"}, "")
	if o.Exit.Code != 2 || !strings.HasPrefix(o.Stderr, "isolate: -b 761: choosing a box id needs root") || strings.Count(o.Stderr, "\n") != 1 {
		t.Errorf("ioi form as nobody: %+v", o)
	}
}

// TestRelayedSignalInterruptsRun: TERM relayed during a run ends it as
// TERM to the binary does: the same exit status, meta file and summary.
func TestRelayedSignalInterruptsRun(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	init := mainWith(t, &Invocation{Args: []string{"isolate", "-b", "762", "--init"}}, "")
	if init.Exit.Code != 0 {
		t.Fatalf("--init: %+v", init)
	}
	defer mainWith(t, &Invocation{Args: []string{"isolate", "-b", "762", "--cleanup"}}, "")
	program := []string{"--", "/bin/sh", "-c", "echo started; exec sleep 60"}
	for _, args := range [][]string{
		append([]string{"run", "--stream", "-b", "763", "--meta", "meta"}, program...),
		append([]string{"-b", "762", "-M", "meta", "--run"}, program...),
	} {
		// The binary, signalled once its program started.
		cmd := exec.Command(isolateBin, args...)
		cmd.Dir = dir
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var binErr bytes.Buffer
		cmd.Stderr = &binErr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line := make([]byte, len("started\n"))
		io.ReadFull(stdout, line)
		cmd.Process.Signal(syscall.SIGTERM)
		rest, _ := io.ReadAll(stdout)
		cmd.Wait()
		bin := outcome{Exit: Exit{Code: cmd.ProcessState.ExitCode()}, Stdout: string(line) + string(rest), Stderr: binErr.String()}
		binMeta, _ := os.ReadFile(filepath.Join(dir, "meta"))

		// Main, with TERM relayed once its program started.
		sigs := make(chan syscall.Signal, 1)
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan Exit, 1)
		go func() {
			done <- Main(context.Background(), &Invocation{Args: append([]string{"isolate"}, args...), Env: os.Environ(), Dir: dir,
				Stdin: os.Stdin, Stdout: outW, Stderr: errW, Signals: sigs, Via: "service"})
			outW.Close()
			errW.Close()
		}()
		var mainErr bytes.Buffer
		errDone := make(chan struct{})
		go func() { io.Copy(&mainErr, errR); close(errDone) }()
		line = make([]byte, len("started\n"))
		io.ReadFull(outR, line)
		sigs <- syscall.SIGTERM
		rest, _ = io.ReadAll(outR)
		<-errDone
		m := outcome{Exit: <-done, Stdout: string(line) + string(rest), Stderr: mainErr.String()}
		outR.Close()
		errR.Close()
		mainMeta, _ := os.ReadFile(filepath.Join(dir, "meta"))

		if bin.Exit.Code == 0 || m.Exit != bin.Exit || m.Stdout != bin.Stdout || normalize(m.Stderr) != normalize(bin.Stderr) {
			t.Errorf("%q:\nbinary %+v\nMain   %+v", args, bin, m)
		}
		if !strings.Contains(string(binMeta), "signal 15") && !strings.Contains(string(binMeta), "exitsig:15") {
			t.Errorf("%q: the binary's meta file says no TERM: %q", args, binMeta)
		}
		if normalize(string(mainMeta)) != normalize(string(binMeta)) {
			t.Errorf("%q: meta file:\nbinary %q\nMain   %q", args, binMeta, mainMeta)
		}
	}
}

// TestSignalWithNoRunEndsInvocation: a relayed signal that finds no run
// to interrupt ends the invocation as it ends isolate.
func TestSignalWithNoRunEndsInvocation(t *testing.T) {
	for sig, want := range map[syscall.Signal]Exit{
		syscall.SIGTERM: {Signal: syscall.SIGTERM}, syscall.SIGHUP: {Signal: syscall.SIGHUP}, syscall.SIGINT: {Signal: syscall.SIGINT},
		syscall.SIGQUIT: {Code: 128 + 3}, syscall.SIGABRT: {Code: 128 + 6}, syscall.SIGSEGV: {Code: 128 + 11},
		syscall.SIGBUS: {Code: 128 + 7}, syscall.SIGFPE: {Code: 128 + 8}, syscall.SIGILL: {Code: 128 + 4},
	} {
		sigs := make(chan syscall.Signal)
		r := relaySignals(sigs)
		sigs <- sig // taken by the relay: no run listens
		sigs <- 0   // a second send returns once the first was handled
		if r.fatal() != sig || exitBy(r.fatal()) != want {
			t.Errorf("%v: fatal %v, exit %+v, want %+v", sig, r.fatal(), exitBy(r.fatal()), want)
		}
		if _, _, ok := r.listen(); ok {
			t.Errorf("%v: a run may still start", sig)
		}
		r.stop()
	}
}

// TestHostPaths: relative paths resolve from the caller's directory, the
// names of the caller's standard descriptors name the ones this process
// holds for it.
func TestHostPaths(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	iv := &invocation{Invocation: &Invocation{Dir: "/home/caller", Stdin: r, Stdout: w, Stderr: os.Stderr, Env: []string{"A=1", "B=2", "A=3"}}}
	for in, want := range map[string]string{
		"x": "/home/caller/x", "../y": "/home/y", "/abs": "/abs", "": "",
		"/dev/stdout": fmt.Sprintf("/proc/self/fd/%d", w.Fd()), "/proc/self/fd/0": fmt.Sprintf("/proc/self/fd/%d", r.Fd()),
		"/dev/stderr": "/dev/stderr",
	} {
		if got := iv.hostPath(in); got != want {
			t.Errorf("hostPath(%q) = %q, want %q", in, got, want)
		}
	}
	if got := iv.imagePath("python"); got != "python" {
		t.Errorf("image name made a path: %q", got)
	}
	if got := iv.profilePath("default"); got != "default" {
		t.Errorf("default profile made a path: %q", got)
	}
	if v, ok := iv.lookupEnv("A"); !ok || v != "1" {
		t.Errorf("lookupEnv(A) = %q %v, want the first, 1", v, ok)
	}
	if _, ok := iv.lookupEnv("C"); ok {
		t.Errorf("lookupEnv(C) found one")
	}
}

// TestBoxIDIsDecimal: --box-id 0x10 (or 010, 0b10, +5) is a usage error,
// never box 16.
func TestBoxIDIsDecimal(t *testing.T) {
	needRoot(t)
	for _, id := range []string{"0x10", "010x", "0b10", "+5", "-1", "1e3", " 7"} {
		o := mainWith(t, &Invocation{Args: []string{"isolate", "run", "--box-id", id, "--", "/bin/true"}, Dir: "/"}, "")
		if o.Exit.Code != 2 || !strings.HasPrefix(o.Stderr, "isolate: --box-id ") || strings.Count(o.Stderr, "\n") != 1 {
			t.Errorf("--box-id %q: %+v, want a usage error", id, o)
		}
	}
	if id, err := ParseBoxID("016"); err != nil || id != 16 {
		t.Errorf("016: %d %v, want 16 (decimal)", id, err)
	}
}

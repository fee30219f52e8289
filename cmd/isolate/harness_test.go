package main

// The tests drive the real isolate binary as users do, as root against the
// real kernel. TestMain builds it (with coverage instrumentation of the
// runtime packages when ISOLATE_COVERDIR is set) unless ISOLATE_BIN names
// one, and checks at the end that nothing of ours leaked.
//
// With ISOLATE_TEST_VIA=service the whole suite runs through a service:
// TestMain starts isolate-serve (beside ISOLATE_BIN, or built) with its
// own sockets and store, and every isolate the tests start hands its run
// to it (ISOLATE_SERVICE_SOCKET); runBox checks which path ran. A test
// that sets an ISOLATE_ variable the service does not honour (a
// configuration file, an image directory) runs in-process by design, and
// runBox expects that (expectedVia). Otherwise the runs are in-process
// (ISOLATE_NO_SERVICE=1, whatever service the machine runs).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/internal/testbin"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// isolateBin is the binary under test.
var isolateBin string

// builtServeDir holds the isolate-serve the suite built, if it did.
var builtServeDir string

// viaService: the runs go through a service (ISOLATE_TEST_VIA=service).
var viaService = os.Getenv("ISOLATE_TEST_VIA") == "service"

func TestMain(m *testing.M) {
	if os.Getenv(orphansEnv) != "" {
		orphansHelper()
	}
	// This binary never starts boxes itself, but if it ever re-executes
	// itself as init, that must win over running the tests again.
	boxinit.MaybeInit()
	if os.Geteuid() != 0 {
		// Every test here drives the binary as root; each skips (needRoot),
		// so that `go test ./...` as a normal user runs the unit layer.
		os.Exit(m.Run())
	}
	code := func() int {
		isolateBin = os.Getenv("ISOLATE_BIN")
		if isolateBin == "" {
			dir, err := os.MkdirTemp("", "isolate-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			// The tests also run it as nobody.
			if err := os.Chmod(dir, 0o755); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			isolateBin = filepath.Join(dir, "isolate")
			var cover []string
			if os.Getenv("ISOLATE_COVERDIR") != "" {
				cover = []string{"-cover", "-coverpkg=github.com/isolate-sandbox/isolate/..."}
			}
			if err := testbin.Build(isolateBin, ".", cover...); err != nil {
				fmt.Fprintln(os.Stderr, "build isolate:", err)
				return 1
			}
		}
		recordMountsAtStart()
		stopService := func() error { return nil }
		if viaService {
			var err error
			if stopService, err = startService(); err != nil {
				fmt.Fprintln(os.Stderr, "start the service:", err)
				return 1
			}
		} else {
			os.Setenv("ISOLATE_NO_SERVICE", "1")
		}
		code := m.Run()
		// The service goes first: what it leaves counts as a leak.
		if err := stopService(); err != nil {
			fmt.Fprintln(os.Stderr, "the service:", err)
			code = 1
		}
		if builtServeDir != "" {
			os.RemoveAll(builtServeDir)
		}
		if probeDir != "" { // the probe's build (probe), made on first use
			os.RemoveAll(probeDir)
		}
		if leaks := findLeaks(); len(leaks) > 0 {
			fmt.Fprintln(os.Stderr, "LEAKED after the test suite:\n  "+strings.Join(leaks, "\n  "))
			if code == 0 {
				code = 1
			}
		}
		return code
	}()
	os.Exit(code)
}

// startService starts isolate-serve for the suite, with its own sockets
// and store, and points every isolate the tests start at it. stop ends
// it as an operator does (SIGTERM: it drains) and removes what it used.
func startService() (stop func() error, err error) {
	svc, err := launchService()
	if err != nil {
		return nil, err
	}
	// Every isolate started from here on hands its runs to the service:
	// no ISOLATE_ variable of the suite's may make it run in-process.
	if d := os.Getenv("ISOLATE_COVERDIR"); d != "" {
		os.Setenv("GOCOVERDIR", d) // for the runs that stay in-process
	}
	for _, name := range []string{"ISOLATE_BIN", "ISOLATE_COVERDIR", "ISOLATE_TEST_VIA"} {
		os.Unsetenv(name)
	}
	os.Setenv("ISOLATE_SERVICE_SOCKET", svc.cliSock)
	return svc.stop, nil
}

// service is a running isolate-serve of the tests'.
type service struct {
	dir, cliSock string
	args         []string
	cmd          *exec.Cmd
	exited       chan error
}

// serveBin is isolate-serve beside isolateBin, or one built once (in a
// directory removed with the suite's service, or at exit).
var serveBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(isolateBin), "isolate-serve")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	dir, err := os.MkdirTemp("", "isolate-serve-bin-")
	if err != nil {
		return "", err
	}
	builtServeDir = dir
	bin = filepath.Join(dir, "isolate-serve")
	if err := testbin.Build(bin, "../isolate-serve"); err != nil {
		return "", fmt.Errorf("build isolate-serve: %v", err)
	}
	return bin, nil
})

// launchService starts isolate-serve with its own sockets and store in a
// new directory, taking the runs of isolateBin, and waits until it
// listens. args are more flags.
func launchService(args ...string) (svc *service, err error) {
	dir, err := os.MkdirTemp("", "isolate-service-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	os.Chmod(dir, 0o755) // the tests' callers who are not root reach the socket
	svc = &service{dir: dir, cliSock: filepath.Join(dir, "cli.sock"), args: args}
	return svc, svc.start()
}

// start starts (or restarts) the service on its sockets.
func (s *service) start() error {
	bin, err := serveBin()
	if err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "serve.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	s.cmd = exec.Command(bin, append([]string{"--socket", filepath.Join(s.dir, "api.sock"), "--cli-socket", s.cliSock,
		"--cli-binary", isolateBin, "--store", filepath.Join(s.dir, "store"), "--grace", "20s"}, s.args...)...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	// The service takes its configuration from its own environment, as
	// an installed one does: none of the suite's variables, but the
	// images directory of a test that has its own.
	s.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if d := os.Getenv("ISOLATE_IMAGES_DIR"); d != "" {
		s.cmd.Env = append(s.cmd.Env, "ISOLATE_IMAGES_DIR="+d)
	}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan<- error) { exited <- cmd.Wait() }(s.cmd, s.exited)
	// (Its sockets listen one after the other: both, before a test uses
	// either.)
	for !serviceAnswers(s.cliSock) || !serviceAnswers(filepath.Join(s.dir, "api.sock")) {
		select {
		case err := <-s.exited:
			return fmt.Errorf("isolate-serve ended (%v):\n%s", err, s.log())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (s *service) log() string {
	out, _ := os.ReadFile(filepath.Join(s.dir, "serve.log"))
	return string(out)
}

// stop ends the service as an operator does (SIGTERM: it drains) and
// removes what it used.
func (s *service) stop() error {
	defer os.RemoveAll(s.dir)
	s.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-s.exited:
	case <-time.After(2 * time.Minute):
		s.cmd.Process.Kill()
		err = fmt.Errorf("did not drain: killed (%v)", <-s.exited)
	}
	if err != nil {
		return fmt.Errorf("%v\n%s", err, s.log())
	}
	return nil
}

// testBoxRoot is where the test's persistent boxes live. In-process: root,
// the test's own (a configuration file in ISOLATE_CONFIG). Through the
// service: the machine's, since the service honours no caller's
// configuration and a --run on a box the test made must go through it.
func testBoxRoot(t *testing.T, root string) string {
	t.Helper()
	if viaService {
		cfg, err := isolate.LoadConfig()
		if err != nil {
			t.Fatal(err)
		}
		return cfg.BoxRoot
	}
	cfg := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(cfg, []byte("# a test's own box root\nbox_root = "+root+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ISOLATE_CONFIG", cfg)
	return root
}

// serviceAnswers tells whether a service listens on the unix socket sock.
func serviceAnswers(sock string) bool {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// expectedVia is which path a run the tests start now takes: through the
// suite's service, unless this process's environment (which the test
// may have changed) keeps it in-process.
func expectedVia() string {
	if !viaService {
		return "in-process"
	}
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case name == "ISOLATE_NO_SERVICE" && value != "":
			return "in-process"
		case strings.HasPrefix(name, "ISOLATE_") && name != "ISOLATE_NO_SERVICE" && name != "ISOLATE_SERVICE_SOCKET":
			return "in-process"
		}
	}
	return "service"
}

// needRoot skips a test as a normal user: the tests here drive isolate,
// which runs only as root, against the real kernel.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: drives the isolate binary (namespaces, cgroups, mounts)")
	}
}

// result is one finished isolate command.
type result struct {
	Stdout, Stderr string
	Code           int
}

// isolateCmd runs the binary with args and an optional standard input.
func isolateCmd(t testing.TB, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(isolateBin, args...)
	cmd.Env = append(os.Environ(), "GOCOVERDIR="+os.Getenv("ISOLATE_COVERDIR"))
	if os.Getenv("ISOLATE_COVERDIR") == "" {
		cmd.Env = os.Environ()
	}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	return runResult(t, cmd)
}

// runResult runs cmd, its output and exit status collected; a command
// that cannot start fails the test.
func runResult(t testing.TB, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", cmd.Args, err)
	}
	return result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// runBox runs `isolate run --json ARGS` and decodes the report. Options
// go before "--" in args.
func runBox(t testing.TB, args ...string) (*isolate.Report, int) {
	t.Helper()
	res := isolateCmd(t, "", append([]string{"run", "--json"}, args...)...)
	var rep isolate.Report
	if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
		t.Fatalf("isolate run %v: exit %d, no JSON report (%v)\nstdout: %s\nstderr: %s", args, res.Code, err, res.Stdout, res.Stderr)
	}
	// The suite proves which path it tests.
	if want := expectedVia(); rep.Sandbox.Via != want {
		t.Fatalf("isolate run %v ran %q, want %q", args, rep.Sandbox.Via, want)
	}
	return &rep, res.Code
}

// expectStatus fails the test unless the report has status want.
func expectStatus(t testing.TB, rep *isolate.Report, want isolate.Status) {
	t.Helper()
	if rep.Status != want {
		t.Fatalf("status %s (message %q, exit %d, signal %d), want %s\nstdout: %q\nstderr: %q",
			rep.Status, rep.Message, rep.ExitCode, rep.Signal, want, rep.Stdout, rep.Stderr)
	}
}

// shareDir makes a temporary directory the box user can read (t.TempDir
// is 0700 root), removed with the test.
func shareDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "isolate-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// compileC builds a C program (static unless dynamic) into dir and returns
// its path.
func compileC(t testing.TB, dir, name, src string, flags ...string) string {
	t.Helper()
	srcPath := filepath.Join(dir, name+".c")
	if err := os.WriteFile(srcPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	args := append([]string{"-O2", "-o", bin, srcPath}, flags...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", name, err, out)
	}
	return bin
}

// findLeaks lists what of ours outlived its run: box cgroups, processes of
// box users, mounts of box roots on the host.
func findLeaks() []string {
	var leaks []string
	leaks = append(leaks, cgroupParentsLeft()...)
	for _, d := range boxCgroups("*") {
		// A box id someone holds is a live run's, this suite's or another
		// sandbox's on the same machine (a service and its pool): only a
		// cgroup of a box nobody holds is left behind. A run removes its
		// cgroup before it lets its id go: one listed before its run
		// ended is gone once the id is free.
		if !boxHeld(strings.TrimPrefix(filepath.Base(d), "box-")) {
			if _, err := os.Stat(d); err == nil {
				leaks = append(leaks, "cgroup "+d)
			}
		}
	}
	leaks = append(leaks, boxUserProcesses(func(pid, uid int, _ string) bool {
		return uid >= isolate.FirstUID && uid < isolate.FirstUID+isolate.DefaultNumBoxes && ownedHere(pid)
	})...)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if cmdline, _ := os.ReadFile(p); bytes.Contains(cmdline, []byte(boxinit.InitArg)) && ownedHere(pid) {
			leaks = append(leaks, "init process "+filepath.Dir(p))
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		// A persistent box's tmpfs is "isolate-box": no test leaves a box
		// initialized. The default box root's is another user's when it
		// was there before the suite.
		if (strings.Contains(line, "/run/isolate/") || strings.Contains(line, " isolate-box ")) && !mountsAtStart[mountPoint(line)] {
			leaks = append(leaks, "mount "+line)
		}
	}
	return leaks
}

// mountsAtStart are the sandbox mounts there before the suite: another
// sandbox's on the same machine, not this suite's to account for.
var mountsAtStart = map[string]bool{}

func recordMountsAtStart() {
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, "/run/isolate/") || strings.Contains(line, " isolate-box ") {
			mountsAtStart[mountPoint(line)] = true
		}
	}
}

// mountPoint is the mount point of a mountinfo line.
func mountPoint(line string) string {
	if f := strings.Fields(line); len(f) > 4 {
		return f[4]
	}
	return ""
}

// boxHeld tells whether someone holds box id's lock: a run in progress.
func boxHeld(id string) bool {
	f, err := os.Open(filepath.Join(isolate.LockDir, "box-"+id))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// ownedHere tells whether a sandbox process is this suite's to account
// for: one under a supervisor this test binary started, or an orphan
// (its supervisor gone, it was handed to PID 1). One under a live
// supervisor of its own, a service running beside the suite, is that
// supervisor's.
func ownedHere(pid int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		ppid := parentOf(pid)
		switch {
		case ppid <= 0:
			return false
		case ppid == 1 || ppid == os.Getpid():
			return true
		}
		if cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(ppid) + "/cmdline"); !bytes.Contains(cmdline, []byte(boxinit.InitArg)) {
			return descendsFromHere(ppid) // the box's supervisor
		}
		pid = ppid
	}
	return false
}

// descendsFromHere tells whether pid is this test binary's descendant.
func descendsFromHere(pid int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		if pid = parentOf(pid); pid == os.Getpid() {
			return true
		}
	}
	return false
}

// parentOf is pid's parent (PPid in /proc/PID/status), or -1.
func parentOf(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "PPid:" {
			ppid, _ := strconv.Atoi(f[1])
			return ppid
		}
	}
	return -1
}

// boxCgroups lists the box cgroups whose id matches the glob id.
func boxCgroups(id string) []string { return cgroupsNamed("box-" + id) }

// holdCgroups lists the holds of box id's persistent box (id may be a
// glob pattern).
func holdCgroups(id string) []string { return cgroupsNamed("hold-box-" + id) }

// cgroupsNamed lists the directories called name (a glob pattern) in
// the parents of box cgroups.
func cgroupsNamed(name string) []string {
	var dirs []string
	for _, pattern := range []string{"/sys/fs/cgroup/*/isolate/", "/sys/fs/cgroup/*/*/*/isolate/", "/sys/fs/cgroup/isolate/", "/sys/fs/cgroup/unified/isolate/"} {
		m, _ := filepath.Glob(pattern + name)
		dirs = append(dirs, m...)
	}
	return dirs
}

// boxUserProcesses lists the processes whose real uid and command name
// match.
func boxUserProcesses(match func(pid, uid int, name string) bool) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*/status")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var name string
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && f[0] == "Name:" {
				name = f[1]
			}
			if len(f) > 1 && f[0] == "Uid:" {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				if uid, _ := strconv.Atoi(f[1]); match(pid, uid, name) {
					found = append(found, "process "+filepath.Dir(p)+" uid "+f[1])
				}
			}
		}
	}
	return found
}

// cgroupParentsLeft lists the "isolate" cgroup directories under this
// process's own cgroups (where the runs of the tests, its children, make
// their boxes): they go with the last box.
func cgroupParentsLeft() []string {
	m, err := cgroup.NewManager("")
	if err != nil {
		return []string{"cgroups: " + err.Error()}
	}
	// Boxes initialised in the default box root (a judge's beside the
	// suite; no test leaves one) list the holds they keep.
	kept := map[string]bool{}
	lists, _ := filepath.Glob(filepath.Join(isolate.DefaultBoxRoot, "*", "cgroup-holds"))
	for _, list := range lists {
		data, _ := os.ReadFile(list)
		for _, h := range strings.Split(string(data), "\n") {
			kept[h] = true
		}
	}
	var left []string
	for _, dir := range m.Parents() {
		// One holding a box is that box's, which the box cgroups' own
		// check accounts for: it goes with the last box. A persistent
		// box's hold keeps it too, and goes with the box.
		holds, _ := filepath.Glob(filepath.Join(dir, "hold-*"))
		for _, h := range holds {
			if !kept[h] {
				left = append(left, "cgroup hold "+h)
			}
		}
		if boxes, err := filepath.Glob(filepath.Join(dir, "box-*")); err == nil && len(boxes) == 0 && len(holds) == 0 {
			if _, err := os.Stat(dir); err == nil {
				left = append(left, "cgroup parent "+dir)
			}
		}
	}
	return left
}

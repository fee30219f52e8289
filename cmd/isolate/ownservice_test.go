package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/isolate"
)

// usersService is a service a user runs for itself, started as the user
// would start it by hand.
type usersService struct {
	own, sock string // the user's runtime directory, the CLI's socket
	exited    chan error
	log       *strings.Builder
	stop      func()
}

// startOwnService starts isolate-serve as u with env (args added), and
// stops it (SIGTERM, as the user's unit does) when the test ends if the
// test did not.
func startOwnService(t *testing.T, u plainUser, env []string, tmp string, args ...string) *usersService {
	t.Helper()
	own := filepath.Join(tmp, "isolate-"+strconv.Itoa(u.uid)) // isolate.UserRuntimeDir with this TMPDIR
	bin, err := serveBin()
	if err != nil {
		t.Fatal(err)
	}
	svc := exec.Command(bin, append([]string{"--allow-rlimit-only", "--cli-binary", isolateBin, "--grace", "5s"}, args...)...)
	svc.Env, svc.Dir = env, "/"
	o := &usersService{own: own, sock: filepath.Join(own, "cli.sock"), exited: make(chan error, 1), log: &strings.Builder{}}
	svc.Stderr = o.log
	svc.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred(), Pdeathsig: syscall.SIGTERM}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { o.exited <- svc.Wait() }()
	stopped := false
	o.stop = func() {
		if stopped {
			return
		}
		stopped = true
		svc.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-o.exited:
			if err != nil {
				t.Errorf("the service ended with %v: %s", err, o.log.String())
			}
		case <-time.After(30 * time.Second):
			svc.Process.Kill()
			<-o.exited
			t.Error("the service did not stop within 30 s of SIGTERM")
		}
	}
	t.Cleanup(o.stop)
	return o
}

// handedOver runs `isolate run --json ARGS` as u until the CLI hands a
// run to the service (it answers once it listens), and returns that
// run's report.
func (o *usersService) handedOver(t *testing.T, u plainUser, env []string, args ...string) *isolate.Report {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		res := asUser(t, u, env, append([]string{"run", "--json"}, args...)...)
		var rep isolate.Report
		if json.Unmarshal([]byte(res.Stdout), &rep) == nil && rep.Sandbox.Via == "service" {
			return &rep
		}
		select {
		case err := <-o.exited:
			t.Fatalf("the service exited (%v): %s", err, o.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run handed over within 30 s (last: exit %d %s %s); the service said: %s", res.Code, res.Stdout, res.Stderr, o.log.String())
		}
	}
}

// A user who is not root runs a service for itself: the user's CLI finds
// it in the user's own directory and hands its runs over; it takes them
// as the CLI would run them without it (the same refusals), hands over
// nothing of root's or of another user's, and leaves nothing when it
// stops. For nobody, and for a user whose gid is not its uid (with
// subordinate ids).
func TestRootlessOwnService(t *testing.T) {
	needRoot(t)
	if serviceAnswers("/run/isolate/cli.sock") {
		t.Skip("a service of root's runs on this machine: it takes the user's runs first")
	}
	t.Run("nobody", func(t *testing.T) { rootlessOwnService(t, nobodyUser) })
	t.Run("uid-not-gid", func(t *testing.T) { rootlessOwnService(t, splitUser(t)) })
}

func rootlessOwnService(t *testing.T, u plainUser) {
	inProcess, tmp := rootlessEnvOf(t, u)
	env := slices.DeleteFunc(slices.Clone(inProcess), func(kv string) bool { return strings.HasPrefix(kv, "ISOLATE_NO_SERVICE=") })
	svc := startOwnService(t, u, env, tmp)
	own, sock := svc.own, svc.sock

	// The user's runs, the CLI finding the service by itself.
	rep := svc.handedOver(t, u, env, "--allow-rlimit-only", "--", "/bin/sh", "-c", "id -u; echo $0")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.Stdout != "1000\n/bin/sh\n" || rep.Sandbox.User != u.boxUser() || rep.Sandbox.Limits["memory"] != "rlimit" {
		t.Errorf("through the user's service: stdout %q, sandbox.user %q, limits %v", rep.Stdout, rep.Sandbox.User, rep.Sandbox.Limits)
	}
	// exec, whose /box is a directory of the user's shared by its phases.
	src := filepath.Join(tmp, "a.c")
	os.WriteFile(src, []byte("#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 6*7); return 0; }\n"), 0o644)
	res := asUser(t, u, env, "exec", "--allow-rlimit-only", "--json", "--image", "host", "--lang", "c", src)
	var er struct {
		Status       string
		Compile, Run *isolate.Report
	}
	if err := json.Unmarshal([]byte(res.Stdout), &er); err != nil || er.Status != "OK" || er.Run == nil || er.Run.Stdout != "42\n" ||
		er.Run.Sandbox.Via != "service" || er.Run.Sandbox.User != u.boxUser() {
		t.Errorf("exec through the user's service: exit %d %s %s", res.Code, res.Stdout, res.Stderr)
	}
	for _, f := range []string{own, sock} {
		var st syscall.Stat_t
		if err := syscall.Lstat(f, &st); err != nil || int(st.Uid) != u.uid || st.Mode&0o077 != 0 {
			t.Errorf("%s: %v, uid %d mode %o: want the user's alone", f, err, st.Uid, st.Mode&0o7777)
		}
	}

	// What the CLI would refuse without the service, it refuses the same
	// way through it; what names a cgroup of the run's own, the service
	// leaves to the CLI.
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"without --allow-rlimit-only", []string{"run", "--", "/bin/true"}, "pass --allow-rlimit-only"},
		{"--cgroup-root", []string{"run", "--allow-rlimit-only", "--cgroup-root", "/sys/fs/cgroup/unified", "--", "/bin/true"}, "--cgroup-root /sys/fs/cgroup/unified:"},
		{"the ioi form", []string{"-b", "3", "--run", "--", "/bin/true"}, "must be started as root"},
	} {
		through, alone := asUser(t, u, env, c.args...), asUser(t, u, inProcess, c.args...)
		if through.Code != 2 || alone.Code != 2 || through.Stderr != alone.Stderr || !strings.Contains(through.Stderr, c.want) {
			t.Errorf("%s: through the service exit %d %q, in-process exit %d %q: want both 2, the same words, %q",
				c.name, through.Code, through.Stderr, alone.Code, alone.Stderr, c.want)
		}
	}

	// Root's runs, and another user's, never go to it: root's CLI hands
	// over to root's services only, and the user's socket is the user's
	// alone.
	direct := []string{"PATH=/usr/bin:/bin", "ISOLATE_SERVICE_SOCKET=" + sock}
	cmd := exec.Command(isolateBin, "run", "--json", "--", "/bin/true")
	cmd.Env, cmd.Dir = direct, "/"
	if r := runResult(t, cmd); !strings.Contains(r.Stdout, `"via":"in-process"`) {
		t.Errorf("root's run at the user's socket: exit %d %s %s, want in-process", r.Code, r.Stdout, r.Stderr)
	}
	other := exec.Command(isolateBin, "run", "--allow-rlimit-only", "--json", "--", "/bin/true")
	other.Env, other.Dir = append(direct, "TMPDIR="+tmp), "/"
	other.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody - 1, Gid: nobody - 1}}
	if r := runResult(t, other); strings.Contains(r.Stdout, `"via":"service"`) {
		t.Errorf("another user's run went to the user's service: %s", r.Stdout)
	}

	svc.stop()
	if left := rootlessLeaksOf(u, tmp, ""); len(left) > 0 {
		t.Errorf("the user's service left %v", left)
	}
	work, _ := filepath.Glob(filepath.Join(own, "work", "*"))
	for _, f := range append(work, sock, filepath.Join(own, "api.sock")) {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("%s is left after the service stopped", f)
		}
	}
}

// copyOutCase is a run that copies files out of its box.
type copyOutCase struct {
	name   string
	script string   // the program, a shell script run in /box
	copyIn bool     // in.txt ("hello\n", mode 0640) copied in as /box/in.txt
	outs   []string // box paths copied out, each to the run's directory under its base name
}

var copyOutCases = []copyOutCase{
	{name: "file", script: "echo hi > o", outs: []string{"/box/o"}},
	{name: "private", script: "umask 077; echo secret > o", outs: []string{"/box/o"}},
	{name: "executable", script: "cp /bin/true sol && chmod 755 sol", outs: []string{"/box/sol"}},
	{name: "tmp", script: "echo t > /tmp/t", outs: []string{"/tmp/t"}},
	{name: "directory", script: "mkdir -p d/e && echo x > d/e/f && echo y > d/g", outs: []string{"/box/d"}},
	{name: "copy-in changed", script: "tr a-z A-Z < in.txt > up && cat up > in.txt", copyIn: true, outs: []string{"/box/in.txt"}},
	{name: "several", script: "echo a > a; echo b > b", outs: []string{"/box/a", "/box/b"}},
	{name: "missing", script: "true", outs: []string{"/box/none"}},
	{name: "after a failure", script: "echo x > o; exit 3", outs: []string{"/box/o"}},
	{name: "PID 1's limits", script: "echo x > o; prlimit --pid 1 --nofile=5:5 && echo lowered PID 1", outs: []string{"/box/o"}},
}

// copyOutOutcome is what a copy-out run gave: its status and output, and
// what each copied-out file is on the host (mode and content, or absent),
// directories walked.
func copyOutOutcome(t *testing.T, rep *isolate.Report, dir string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "status %s exit %d stdout %q\n", rep.Status, rep.ExitCode, rep.Stdout)
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		data := []byte(nil)
		if fi.Mode().IsRegular() {
			data, _ = os.ReadFile(path)
			if len(data) > 64 {
				data = data[:64] // (a binary: its mode is what matters)
			}
		}
		fmt.Fprintf(&b, "%s %v %q\n", rel, fi.Mode(), data)
		return nil
	})
	return b.String()
}

// Every copy-out sequence gives through a user's own service, whose pool
// builds boxes ahead, what it gives in-process: the same status, output
// and files (modes included). The pooled box maps the user as a box
// built for the run does: with subordinate ids the program is a
// subordinate uid (sandbox.host_uid) and cannot lower PID 1's limits.
func TestRootlessOwnServicePooledCopyOut(t *testing.T) {
	needRoot(t)
	if serviceAnswers("/run/isolate/cli.sock") {
		t.Skip("a service of root's runs on this machine: it takes the user's runs first")
	}
	t.Run("nobody", func(t *testing.T) { ownServicePooledCopyOut(t, nobodyUser) })
	t.Run("uid-not-gid", func(t *testing.T) { ownServicePooledCopyOut(t, splitUser(t)) })
}

func ownServicePooledCopyOut(t *testing.T, u plainUser) {
	inProcess, tmp := rootlessEnvOf(t, u)
	env := slices.DeleteFunc(slices.Clone(inProcess), func(kv string) bool { return strings.HasPrefix(kv, "ISOLATE_NO_SERVICE=") })
	svc := startOwnService(t, u, env, tmp)
	svc.handedOver(t, u, env, "--allow-rlimit-only", "--", "/bin/true")
	in := filepath.Join(tmp, "in.txt")
	if err := os.WriteFile(in, []byte("hello\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	os.Chown(in, u.uid, u.gid)

	n, claimed := 0, 0
	run := func(c copyOutCase, env []string) (*isolate.Report, string) {
		n++
		dir := filepath.Join(tmp, "out-"+strconv.Itoa(n))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(dir, u.uid, u.gid)
		args := []string{"run", "--allow-rlimit-only", "--json"}
		if c.copyIn {
			args = append(args, "--copy-in", in+":/box/in.txt")
		}
		for _, o := range c.outs {
			args = append(args, "--copy-out", o+":"+filepath.Join(dir, filepath.Base(o)))
		}
		res := asUser(t, u, env, append(args, "--", "/bin/sh", "-c", c.script)...)
		var rep isolate.Report
		if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
			t.Fatalf("%s: exit %d, no report: %s", c.name, res.Code, res.Stderr)
		}
		return &rep, copyOutOutcome(t, &rep, dir)
	}
	for _, c := range copyOutCases {
		rep, want := run(c, inProcess)
		if rep.Sandbox.Via != "in-process" {
			t.Fatalf("%s: ran %s, want in-process", c.name, rep.Sandbox.Via)
		}
		// Several times through the service: boxes built ahead, and
		// boxes built for the run once the pool is empty.
		for i := 0; i < 3; i++ {
			rep, got := run(c, env)
			if rep.Sandbox.Via != "service" {
				t.Fatalf("%s: ran %s, want service", c.name, rep.Sandbox.Via)
			}
			if _, ok := rep.Sandbox.Stages["claim"]; ok {
				claimed++
			}
			if got != want {
				t.Errorf("%s through the service (%s):\n%s\nin-process:\n%s", c.name, rep.Message, got, want)
			}
			if rep.Sandbox.User != u.boxUser() || (rep.Sandbox.HostUID == u.uid) == u.subordinate || rep.Sandbox.HostUID == 0 {
				t.Errorf("%s through the service: sandbox.user %q host_uid %d, as %s (uid %d)", c.name, rep.Sandbox.User, rep.Sandbox.HostUID, u.name, u.uid)
			}
			if u.subordinate && strings.Contains(rep.Stdout, "lowered PID 1") {
				t.Errorf("%s: the program, a subordinate uid, lowered PID 1's limits", c.name)
			}
		}
	}
	if claimed == 0 {
		t.Errorf("no run took a box the pool built ahead: %s", svc.log.String())
	}
	svc.stop()
	if left := rootlessLeaksOf(u, tmp, ""); len(left) > 0 {
		t.Errorf("the user's runs left %v", left)
	}
}

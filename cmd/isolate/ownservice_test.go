package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/isolate"
)

// A user who is not root runs a service for itself: the user's CLI finds
// it in the user's own directory and hands its runs over; it takes them
// as the CLI would run them without it (the same refusals), hands over
// nothing of root's or of another user's, and leaves nothing when it
// stops.
func TestRootlessOwnService(t *testing.T) {
	needRoot(t)
	if serviceAnswers("/run/isolate/cli.sock") {
		t.Skip("a service of root's runs on this machine: it takes the user's runs first")
	}
	inProcess, tmp := rootlessEnv(t)
	env := slices.DeleteFunc(slices.Clone(inProcess), func(kv string) bool { return strings.HasPrefix(kv, "ISOLATE_NO_SERVICE=") })
	own := filepath.Join(tmp, "isolate-65534") // isolate.UserRuntimeDir with this TMPDIR
	sock := filepath.Join(own, "cli.sock")

	bin, err := serveBin()
	if err != nil {
		t.Fatal(err)
	}
	svc := exec.Command(bin, "--allow-rlimit-only", "--cli-binary", isolateBin, "--grace", "5s")
	svc.Env, svc.Dir = env, "/"
	var log strings.Builder
	svc.Stderr = &log
	svc.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}, Pdeathsig: syscall.SIGTERM}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- svc.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		svc.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the service ended with %v: %s", err, log.String())
			}
		case <-time.After(30 * time.Second):
			svc.Process.Kill()
			<-exited
			t.Error("the service did not stop within 30 s of SIGTERM")
		}
	}
	defer stop()

	// The user's runs, the CLI finding the service by itself.
	run := func(args ...string) (*isolate.Report, result) {
		res := asNobody(t, env, append([]string{"run", "--json"}, args...)...)
		var rep isolate.Report
		if json.Unmarshal([]byte(res.Stdout), &rep) != nil {
			return nil, res
		}
		return &rep, res
	}
	var rep *isolate.Report
	var res result
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if rep, res = run("--allow-rlimit-only", "--", "/bin/sh", "-c", "id -u; echo $0"); rep != nil && rep.Sandbox.Via == "service" {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the service exited (%v): %s", err, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run handed over within 30 s (last: exit %d %s %s); the service said: %s", res.Code, res.Stdout, res.Stderr, log.String())
		}
	}
	expectStatus(t, rep, isolate.StatusOK)
	if rep.Stdout != "1000\n/bin/sh\n" || rep.Sandbox.User != "caller" || rep.Sandbox.Limits["memory"] != "rlimit" {
		t.Errorf("through the user's service: stdout %q, sandbox.user %q, limits %v", rep.Stdout, rep.Sandbox.User, rep.Sandbox.Limits)
	}
	for _, f := range []string{own, sock} {
		var st syscall.Stat_t
		if err := syscall.Lstat(f, &st); err != nil || st.Uid != nobody || st.Mode&0o077 != 0 {
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
		through, alone := asNobody(t, env, c.args...), asNobody(t, inProcess, c.args...)
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

	stop()
	if left := rootlessLeaks(tmp, ""); len(left) > 0 {
		t.Errorf("the user's service left %v", left)
	}
	work, _ := filepath.Glob(filepath.Join(own, "work", "*"))
	for _, f := range append(work, sock, filepath.Join(own, "api.sock")) {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("%s is left after the service stopped", f)
		}
	}
}

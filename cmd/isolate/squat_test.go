package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/isolate"
)

// TestSquattedRuntimeDir: another user who made $TMPDIR/isolate-UID
// first (a shared /tmp is anyone's) denies the user nothing: its runs
// and its own service use $HOME/.cache/isolate instead, the service says
// so, and the user's CLI finds the service there.
func TestSquattedRuntimeDir(t *testing.T) {
	needRoot(t)
	if serviceAnswers("/run/isolate/cli.sock") {
		t.Skip("a service of root's runs on this machine: it takes the user's runs first")
	}
	inProcess, tmp := rootlessEnv(t)
	squat := filepath.Join(tmp, "isolate-65534")
	if err := os.Mkdir(squat, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(squat, 0o777)
	os.Chown(squat, otherUID, otherUID)
	home := shareDir(t)
	os.Chown(home, nobody, nobody)
	inProcess = append(inProcess, "HOME="+home)

	rep, code := rootlessRun(t, inProcess, "--", "/bin/true")
	if code != 0 || rep.Status != isolate.StatusOK {
		t.Fatalf("an in-process run beside a squatted %s: exit %d %+v", squat, code, rep)
	}
	if _, err := os.Stat(filepath.Join(home, ".cache", "isolate", "locks")); err != nil {
		t.Errorf("the user's runtime directory is not under $HOME: %v", err)
	}

	env := slices.DeleteFunc(slices.Clone(inProcess), func(kv string) bool { return strings.HasPrefix(kv, "ISOLATE_NO_SERVICE=") })
	bin, err := serveBin()
	if err != nil {
		t.Fatal(err)
	}
	svc := exec.Command(bin, "--allow-rlimit-only", "--cli-binary", isolateBin, "--grace", "5s")
	svc.Env, svc.Dir = env, "/"
	var log lockedLog
	svc.Stderr = &log
	svc.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}, Pdeathsig: syscall.SIGTERM}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		svc.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- svc.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			svc.Process.Kill()
			<-done
		}
	}()
	waitFor(t, "the user's service answers", func() bool {
		res := asNobody(t, env, "run", "--json", "--allow-rlimit-only", "--", "/bin/true")
		var rep isolate.Report
		return json.Unmarshal([]byte(res.Stdout), &rep) == nil && rep.Sandbox.Via == "service"
	})
	if !strings.Contains(log.String(), "warning: "+squat+" is not a directory of uid 65534's alone") {
		t.Errorf("the service does not say why it moved: %s", log.String())
	}
	if _, err := os.Stat(filepath.Join(squat, "cli.sock")); err == nil {
		t.Errorf("the service listens in the squatted directory")
	}
}

// lockedLog is a process's output, written by exec's copying goroutine
// and read by the test.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

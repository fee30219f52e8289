package main

// Judges beside a service: the call sequences of the judges that call
// ioi/isolate, with the box ids they name, while a service with its
// default pool runs on the same machine; the judges' isolate runs in
// process and hands its runs to that service.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
)

// judgeCalls runs the ioi form as a judge does, in the environment env.
type judgeCalls struct {
	t    *testing.T
	env  []string
	meta string
}

// call runs isolate with args and fails the test unless it exits 0; it
// returns the standard output.
func (j *judgeCalls) call(args ...string) string {
	j.t.Helper()
	cmd := exec.Command(isolateBin, args...)
	cmd.Env = j.env
	res := runResult(j.t, cmd)
	if res.Code != 0 {
		meta, _ := os.ReadFile(j.meta)
		j.t.Fatalf("isolate %s: exit %d: %s\nmeta: %s", strings.Join(args, " "), res.Code, res.Stderr, meta)
	}
	return res.Stdout
}

func (j *judgeCalls) init(id int) string {
	j.t.Helper()
	dir := strings.TrimSpace(j.call("--cg", "-b", strconv.Itoa(id), "--init"))
	// A test that fails half-way leaves no box (a second cleanup finds
	// none, and does nothing).
	j.t.Cleanup(func() {
		cmd := exec.Command(isolateBin, "-b", strconv.Itoa(id), "--cleanup")
		cmd.Env = handoverEnv("")
		cmd.Run()
	})
	return dir
}

func (j *judgeCalls) run(id int, command ...string) string {
	j.t.Helper()
	return j.call(append([]string{"--cg", "-b", strconv.Itoa(id), "-M", j.meta, "-p", "--run", "--"}, command...)...)
}

func (j *judgeCalls) cleanup(id int) {
	j.t.Helper()
	j.call("--cg", "-b", strconv.Itoa(id), "--cleanup")
}

// judgeLockNames are the names in the lock directory of box ids.
func judgeLockNames(ids []int) []string {
	var names []string
	for _, id := range ids {
		for _, kind := range []string{"box-", "pbox-", "ahead-"} {
			names = append(names, kind+strconv.Itoa(id))
		}
	}
	return names
}

// takeStaleLock removes the lock file name if no one holds it, as a
// holder would (what an earlier isolate left, that kept its files).
func takeStaleLock(name string) {
	path := filepath.Join(isolate.LockDir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return
	}
	var held, named unix.Stat_t
	if unix.Fstat(fd, &held) == nil && unix.Lstat(path, &named) == nil && held.Ino == named.Ino && held.Dev == named.Dev {
		unix.Unlink(path)
	}
}

// staleLocks lists the lock files among names that exist and no one holds.
func staleLocks(names []string) []string {
	var stale []string
	for _, name := range names {
		if _, err := os.Lstat(filepath.Join(isolate.LockDir, name)); err == nil && !lockHeld(name) {
			stale = append(stale, name)
		}
	}
	return stale
}

// A judge names its own box ids (CMS 0-2, Piston 1, 2, 3, Judge0 the
// submission's id, Judgels 0-99) while a service with its default pool
// runs beside it: the pool's boxes never hold one of those ids, every
// --run of the judge's boxes works, the service logs no error for the
// boxes the judge cleaned up, and no lock file is left once the locks are
// free.
func TestJudgesBesideAService(t *testing.T) {
	needRoot(t)
	var ids []int
	for id := 0; id < 100; id++ {
		ids = append(ids, id)
	}
	names := judgeLockNames(ids)
	for _, name := range names {
		takeStaleLock(name)
	}
	svc, err := launchService()
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			if err := svc.stop(); err != nil {
				t.Errorf("the service: %v", err)
			}
		}
	}
	defer stop()
	pid := svc.cmd.Process.Pid
	waitFor(t, "the service's pool to build a box", func() bool { return len(boxInits(pid)) > 0 })
	for _, mode := range []struct{ name, sock string }{{"in process", ""}, {"handed over", svc.cliSock}} {
		t.Run(mode.name, func(t *testing.T) {
			j := &judgeCalls{t: t, env: handoverEnv(mode.sock), meta: filepath.Join(t.TempDir(), "meta")}
			// CMS: a box per worker, 0 to 2; each runs, then is cleaned up.
			for id := 0; id < 3; id++ {
				j.init(id)
			}
			for id := 0; id < 3; id++ {
				if out := j.run(id, "/bin/echo", "cms"); out != "cms\n" {
					t.Errorf("CMS box %d: %q", id, out)
				}
			}
			for id := 0; id < 3; id++ {
				j.cleanup(id)
			}
			// Piston: boxes 1, 2, 3; the compiled file moves from the
			// box that compiled it into the one that runs it.
			var dirs []string
			for id := 1; id <= 3; id++ {
				dirs = append(dirs, j.init(id))
			}
			j.run(1, "/bin/cp", "/bin/echo", "/box/binary")
			if err := os.Rename(filepath.Join(dirs[0], "box", "binary"), filepath.Join(dirs[1], "box", "binary")); err != nil {
				t.Fatalf("move the compiled file between boxes: %v", err)
			}
			if out := j.run(2, "/box/binary", "piston"); out != "piston\n" {
				t.Errorf("Piston box 2: %q", out)
			}
			j.run(3, "/bin/true")
			for id := 1; id <= 3; id++ {
				j.cleanup(id)
			}
			// Judge0: the submission's id as the box id.
			const submission = 42
			j.init(submission)
			if out := j.run(submission, "/bin/echo", "judge0"); out != "judge0\n" {
				t.Errorf("Judge0 box %d: %q", submission, out)
			}
			j.cleanup(submission)
			// Judgels: boxes 0 to 99, each runs, all cleaned up.
			for _, id := range ids {
				j.init(id)
			}
			for _, id := range ids {
				j.run(id, "/bin/true")
			}
			for _, id := range ids {
				j.cleanup(id)
			}
		})
	}
	// The boxes the service builds ahead for the judge's ids are gone
	// with the cleaned-up boxes (aheadIdle at most), and their locks.
	for deadline := time.Now().Add(30 * time.Second); len(staleLocks(names)) > 0 || len(heldLocks(names)) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the judge's ids still have lock files: %v stale, %v held", staleLocks(names), heldLocks(names))
		}
	}
	// The pool's own boxes hold ids of the range isolate picks itself.
	first, n := (&isolate.Config{NumBoxes: isolate.DefaultNumBoxes}).AutoBoxes()
	var pooled []string
	for id := first; id < first+n; id++ {
		if name := "box-" + strconv.Itoa(id); lockHeld(name) {
			pooled = append(pooled, name)
		}
	}
	if len(pooled) == 0 {
		t.Errorf("the service's pool holds no box id of %d-%d", first, first+n-1)
	}
	stop()
	if log := svc.log(); strings.Contains(log, "build box") {
		t.Errorf("the service logged errors for the boxes the judge cleaned up:\n%s", log)
	}
	if stale := staleLocks(names); len(stale) > 0 {
		t.Errorf("lock files left in %s: %v", isolate.LockDir, stale)
	}
	// The pool's boxes' locks went with the service.
	if stale := staleLocks(pooled); len(stale) > 0 {
		t.Errorf("lock files of the pool's boxes left in %s: %v", isolate.LockDir, stale)
	}
}

// heldLocks lists the locks among names that someone holds.
func heldLocks(names []string) []string {
	var held []string
	for _, name := range names {
		if lockHeld(name) {
			held = append(held, name)
		}
	}
	return held
}

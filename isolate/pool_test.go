package isolate_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
)

// pooledHost is a host with a pool of boxes built ahead, stopped when the
// test ends.
func pooledHost(t *testing.T, cfg isolate.PoolConfig) *isolate.Host {
	t.Helper()
	needRoot(t)
	h := newHost(t)
	if err := h.StartPool(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.StopPool)
	return h
}

// checkNothingLeft checks, when the test ends (after its pools stopped),
// that no box is left.
func checkNothingLeft(t *testing.T) {
	needRoot(t)
	t.Cleanup(func() {
		if err := leftBehind(newHost(t)); err != nil {
			t.Error(err)
		}
	})
}

// leftBehind finds what boxes leave: a child process of ours, a box
// cgroup.
func leftBehind(h *isolate.Host) error {
	if kids := children(); len(kids) > 0 {
		return fmt.Errorf("processes %v are still our children", kids)
	}
	// (Other test binaries run boxes meanwhile: only a cgroup whose box
	// id nobody holds is left behind.)
	boxes, err := isolate.UnheldBoxCgroups(h)
	if err != nil {
		return err
	}
	if len(boxes) > 0 {
		return fmt.Errorf("box cgroups left: %v", boxes)
	}
	return nil
}

// children lists this process's child processes (the boxes' inits), from
// every thread's list: each init's parent is the thread that forked it.
func children() []int {
	var kids []int
	lists, _ := filepath.Glob("/proc/self/task/*/children")
	for _, l := range lists {
		b, _ := os.ReadFile(l)
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			kids = append(kids, pid)
		}
	}
	return kids
}

// running tells whether process pid exists and has not exited (a zombie
// has).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := strings.LastIndexByte(string(b), ')')
	return err == nil && i > 0 && !strings.HasPrefix(string(b[i+1:]), " Z")
}

// awaitReady waits until the pool has a box ready.
func awaitReady(t *testing.T, h *isolate.Host) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for h.PoolReady() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the pool built no box in 20 s")
		}
		time.Sleep(time.Millisecond)
	}
}

func claimed(rep *api.Report) bool {
	_, ok := rep.Sandbox.Stages["claim"]
	return ok
}

// A run in a box built ahead reports what a one-shot run reports, limits
// enforced alike; so does a run that found no box ready (a key never
// warmed) and built its own.
func TestPoolRunsLikeOneShot(t *testing.T) {
	checkNothingLeft(t)
	pooled := pooledHost(t, isolate.PoolConfig{Max: 2})
	// Runs of keys never warmed, on a pool of their own (their misses
	// make demand for their keys).
	missing := pooledHost(t, isolate.PoolConfig{Max: 1})
	oneShot := newHost(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("copied in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		spec  api.Spec
		stdin string
	}{
		{"output and exit", api.Spec{Args: []string{"/bin/sh", "-c", "cat; echo err >&2; exit 3"}}, "from stdin"},
		{"stderr to stdout", api.Spec{Args: []string{"/bin/sh", "-c", "echo a; echo b >&2"}, StderrToStdout: true}, ""},
		{"not found", api.Spec{Args: []string{"/no/such/program"}}, ""},
		{"signal", api.Spec{Args: []string{"/bin/sh", "-c", "kill -SEGV $$"}}, ""},
		{"memory", api.Spec{Args: []string{"/bin/sh", "-c", `x=xxxxxxxxxxxxxxxx; while true; do x="$x$x"; done`}, MemoryBytes: 16 << 20}, ""},
		{"cpu", api.Spec{Args: []string{"/bin/sh", "-c", "while :; do :; done"}, CPUTimeMs: 200}, ""},
		{"pids", api.Spec{Args: []string{"/bin/sh", "-c", "for i in 1 2 3 4 5 6; do sleep 5 & done; wait"}, Pids: 3, WallTimeMs: 3000}, ""},
		{"copy in", api.Spec{Args: []string{"/bin/cat", "/box/in.txt"}, CopyIn: []api.Copy{{From: in, To: "/box/in.txt"}}}, ""},
		{"output beyond the box", api.Spec{Args: []string{"/bin/sh", "-c", "(sleep 0.2; echo late) & echo early"}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := func(h *isolate.Host, spec api.Spec) *api.Report {
				var stdin interface{ Read([]byte) (int, error) }
				if c.stdin != "" {
					stdin = strings.NewReader(c.stdin)
				}
				rep, err := h.Run(context.Background(), &spec, isolate.IO{Stdin: stdin})
				if err != nil {
					t.Fatal(err)
				}
				return rep
			}
			want := run(oneShot, c.spec)
			awaitReady(t, pooled)
			got := run(pooled, c.spec)
			if !claimed(got) {
				t.Errorf("the run did not claim a ready box: stages %v", got.Sandbox.Stages)
			}
			// Never warmed: no box ready for this tmp size.
			fallback := c.spec
			fallback.TmpSizeBytes = 32<<20 + int64(len(c.name))
			fb := run(missing, fallback)
			if claimed(fb) {
				t.Errorf("a run of a key never warmed claimed a box")
			}
			for _, r := range []*api.Report{got, fb} {
				if r.Status != want.Status || r.ExitCode != want.ExitCode || r.Signal != want.Signal || r.Limit != want.Limit ||
					r.Stdout != want.Stdout || r.Stderr != want.Stderr || r.Message != want.Message || r.OOMKilled != want.OOMKilled {
					t.Errorf("pooled %s exit %d sig %d limit %q out %q err %q msg %q oom %v\none-shot %s exit %d sig %d limit %q out %q err %q msg %q oom %v",
						r.Status, r.ExitCode, r.Signal, r.Limit, r.Stdout, r.Stderr, r.Message, r.OOMKilled,
						want.Status, want.ExitCode, want.Signal, want.Limit, want.Stdout, want.Stderr, want.Message, want.OOMKilled)
				}
			}
			if c.name == "pids" && (got.PidsPeak != 3 || want.PidsPeak != 3) {
				t.Errorf("pids peak %d pooled, %d one-shot; want the limit, 3", got.PidsPeak, want.PidsPeak)
			}
		})
	}
}

// A box serves one command: the next run, claimed as well, sees nothing
// the previous one left.
func TestPoolNeverReusesABox(t *testing.T) {
	checkNothingLeft(t)
	h := pooledHost(t, isolate.PoolConfig{Max: 2})
	for i := 0; i < 5; i++ {
		awaitReady(t, h)
		rep, err := h.Run(context.Background(), &api.Spec{Args: []string{"/bin/sh", "-c",
			"ls /box /tmp; touch /box/mark /tmp/mark"}}, isolate.IO{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Status != api.StatusOK || !claimed(rep) {
			t.Fatalf("run %d: %s %q, claimed %v, stderr %q", i, rep.Status, rep.Message, claimed(rep), rep.Stderr)
		}
		if strings.Contains(rep.Stdout, "mark") {
			t.Errorf("run %d saw a used box: %q", i, rep.Stdout)
		}
	}
}

// StopPool tears down the waiting boxes and the claimed boxes still
// ending in the background: nothing is left (pooledHost checks).
func TestPoolStopLeavesNothing(t *testing.T) {
	checkNothingLeft(t)
	h := pooledHost(t, isolate.PoolConfig{Max: 3, Builders: 2})
	awaitReady(t, h)
	rep, err := h.Run(context.Background(), &api.Spec{Args: []string{"/bin/true"}}, isolate.IO{})
	if err != nil || rep.Status != api.StatusOK {
		t.Fatalf("%v %+v", err, rep)
	}
	awaitReady(t, h)
	h.StopPool()
	if n := h.PoolReady(); n != 0 {
		t.Errorf("%d boxes ready after StopPool", n)
	}
	if err := leftBehind(h); err != nil {
		t.Error(err)
	}
	// A run after the pool builds its own box.
	rep, err = h.Run(context.Background(), &api.Spec{Args: []string{"/bin/true"}}, isolate.IO{})
	if err != nil || rep.Status != api.StatusOK || claimed(rep) {
		t.Fatalf("after StopPool: %v %+v", err, rep)
	}
}

// A box killed while it waited is never handed out: the run takes
// another or builds its own. (One that dies while it is being claimed
// makes that run XX, "box init died during setup".)
func TestPoolSkipsDeadBoxes(t *testing.T) {
	checkNothingLeft(t)
	h := pooledHost(t, isolate.PoolConfig{Max: 2})
	awaitReady(t, h)
	// No run is under way: every child is a waiting box's init.
	killed := children()
	for _, pid := range killed {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// Dead (a zombie until the pool reaps it), not dying.
	for _, pid := range killed {
		for running(pid) {
			time.Sleep(time.Millisecond)
		}
	}
	rep, err := h.Run(context.Background(), &api.Spec{Args: []string{"/bin/echo", "ok"}}, isolate.IO{})
	if err != nil || rep.Status != api.StatusOK || rep.Stdout != "ok\n" {
		t.Fatalf("after the waiting boxes were killed: %v %s %q %q", err, rep.Status, rep.Message, rep.Stdout)
	}
	awaitReady(t, h)
	rep, err = h.Run(context.Background(), &api.Spec{Args: []string{"/bin/echo", "ok"}}, isolate.IO{})
	if err != nil || rep.Status != api.StatusOK || !claimed(rep) {
		t.Fatalf("the pool did not recover: %v %s %q", err, rep.Status, rep.Message)
	}
}

// A claimed box whose run's context carries EndAfter is kept (its init
// waits) until the channel closes, then ends; a channel never closed
// holds it at most a second, and StopPool does not wait for it.
func TestPoolEndsAfterTheCaller(t *testing.T) {
	checkNothingLeft(t)
	run := func(t *testing.T, h *isolate.Host, answered chan struct{}) []int {
		t.Helper()
		awaitReady(t, h)
		// With Max 1 the claimed box is replaced only once it has
		// ended: until then the children are its init.
		rep, err := h.Run(isolate.EndAfter(context.Background(), answered), &api.Spec{Args: []string{"/bin/true"}}, isolate.IO{})
		if err != nil || rep.Status != api.StatusOK || !claimed(rep) {
			t.Fatalf("%v %+v", err, rep)
		}
		box := children()
		if len(box) == 0 {
			t.Fatal("the claimed box ended before its caller had its answer")
		}
		return box
	}
	gone := func(t *testing.T, box []int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			left := 0
			for _, pid := range box {
				if running(pid) {
					left++
				}
			}
			if left == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the claimed box's init %v did not end", box)
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Run("answered", func(t *testing.T) {
		h := pooledHost(t, isolate.PoolConfig{Max: 1})
		answered := make(chan struct{})
		box := run(t, h, answered)
		// Without EndAfter init exits by itself at once; held, it is
		// still there a while later.
		time.Sleep(100 * time.Millisecond)
		for _, pid := range box {
			if !running(pid) {
				t.Fatalf("init %d ended before the caller had its answer", pid)
			}
		}
		close(answered)
		gone(t, box)
	})
	t.Run("never answered", func(t *testing.T) {
		h := pooledHost(t, isolate.PoolConfig{Max: 1})
		gone(t, run(t, h, make(chan struct{})))
	})
	t.Run("pool stopped", func(t *testing.T) {
		h := pooledHost(t, isolate.PoolConfig{Max: 1})
		run(t, h, make(chan struct{}))
		h.StopPool()
		if err := leftBehind(h); err != nil {
			t.Error(err)
		}
	})
}

// A box built ahead starts its program's process with the box, filter
// loaded (init_proc.c): a command with the default policy runs in that
// process, born before the command, and its refused syscalls are still
// recorded; a command with another policy gets a process of its own,
// under its own policy.
func TestPoolPreparedProcess(t *testing.T) {
	checkNothingLeft(t)
	h := pooledHost(t, isolate.PoolConfig{Max: 2})
	// The program's age (its start, in clock ticks since boot, against
	// the uptime), its filter, and a syscall the default policy refuses.
	script := `set -- $(cat /proc/$$/stat); echo "${22} $(cut -d' ' -f1 /proc/uptime) $(grep '^Seccomp:' /proc/$$/status)"; unshare -U true 2>/dev/null`
	age := func(t *testing.T, rep *api.Report) (float64, string) {
		t.Helper()
		var ticks, uptime float64
		var seccomp string
		if _, err := fmt.Sscanf(rep.Stdout, "%f %f Seccomp: %s", &ticks, &uptime, &seccomp); err != nil {
			t.Fatalf("%v in %q (%s %q)", err, rep.Stdout, rep.Status, rep.Stderr)
		}
		return uptime - ticks/100, seccomp // USER_HZ: 100 on Linux
	}
	const idle = 500 * time.Millisecond
	for _, c := range []struct {
		policy   string
		prepared bool
		seccomp  string
		blocked  bool
	}{{"default", true, "2", true}, {"none", false, "2", false}} { // (none: the vsock guard alone)
		t.Run(c.policy, func(t *testing.T) {
			awaitReady(t, h)
			time.Sleep(idle) // the box's process waits meanwhile
			rep, err := h.Run(context.Background(), &api.Spec{Args: []string{"/bin/sh", "-c", script}, Seccomp: c.policy}, isolate.IO{})
			if err != nil {
				t.Fatal(err)
			}
			if !claimed(rep) {
				t.Fatalf("the run did not claim a ready box: stages %v", rep.Sandbox.Stages)
			}
			old, seccomp := age(t, rep)
			if prepared := old >= idle.Seconds(); prepared != c.prepared {
				t.Errorf("the program's process was %.2f s old: prepared %v, want %v", old, prepared, c.prepared)
			}
			if seccomp != c.seccomp {
				t.Errorf("Seccomp: %s, want %s", seccomp, c.seccomp)
			}
			blocked := len(rep.BlockedSyscalls) > 0 && rep.BlockedSyscalls[0].Name == "unshare"
			if blocked != c.blocked {
				t.Errorf("blocked syscalls %v, want unshare recorded: %v", rep.BlockedSyscalls, c.blocked)
			}
		})
	}
}

// Only host and built images are built ahead: a box of an image
// directory given by path would hold what the directory held when the
// box was built, not what it holds when the run asks.
func TestPoolTakesNoImageDirectory(t *testing.T) {
	h := newHost(t)
	for _, c := range []struct {
		image  string
		pooled bool
	}{{"host", true}, {"/", true}, {t.TempDir(), false}} {
		p, err := h.Prepare(&api.Spec{Args: []string{"/bin/true"}, Image: c.image})
		if err != nil {
			t.Fatal(err)
		}
		if got := isolate.Pooled(p); got != c.pooled {
			t.Errorf("image %s: pooled %v, want %v", c.image, got, c.pooled)
		}
		p.Close()
	}
}

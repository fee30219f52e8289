package main

// The ioi form through the service runs on the service's one Host, and
// leaves the service's process state alone.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// builtAhead tells whether a box of box id is built ahead and waiting
// for the id's next run: it holds the id's "ahead" lock, and no run
// holds the id's run lock.
func builtAhead(id int) bool {
	return lockHeld("ahead-"+strconv.Itoa(id)) && !lockHeld("box-"+strconv.Itoa(id))
}

// lockHeld tells whether someone holds the lock name of isolate.LockDir,
// as /proc/locks shows (trying it would take it, and keep out the
// service for that moment).
func lockHeld(name string) bool {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(isolate.LockDir, name), &st); err != nil {
		return false
	}
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false
	}
	file := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	for _, line := range strings.Split(string(locks), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[1] == "FLOCK" && f[5] == file {
			return true
		}
	}
	return false
}

// boxInits lists the box inits the process pid started.
func boxInits(pid int) map[int]bool {
	inits := map[int]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		child, _ := strconv.Atoi(filepath.Base(p))
		if parentOf(child) != pid {
			continue
		}
		args, _ := os.ReadFile(p + "/cmdline")
		if f := bytes.Split(args, []byte{0}); len(f) > 1 && string(f[1]) == boxinit.InitArg {
			inits[child] = true
		}
	}
	return inits
}

// processOf finds the process of the box user of box id named name.
func processOf(id int, name string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/status")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var n string
		var uid int
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && f[0] == "Name:" {
				n = f[1]
			}
			if len(f) > 1 && f[0] == "Uid:" {
				uid, _ = strconv.Atoi(f[1])
			}
		}
		if n == name && uid == isolate.FirstUID+id {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	return 0
}

// A --run of the ioi form handed to the service runs on the service's
// Host, with its pool: once it has ended, the pool has built the next box
// of its id ahead, and the next --run of the id runs its program in that
// very box (a Host of the run's own has no pool, and builds a box for
// each run).
func TestIOIHandedOverRunsOnTheServiceHost(t *testing.T) {
	needRoot(t)
	const id = 946
	svc := ownService(t)
	machineBox(t, id)
	pid := svc.cmd.Process.Pid
	run := func(stdin *os.File, command ...string) *exec.Cmd {
		t.Helper()
		cmd := exec.Command(isolateBin, append([]string{"-b", strconv.Itoa(id), "--run", "--"}, command...)...)
		cmd.Env = handoverEnv(svc.cliSock)
		if stdin != nil {
			cmd.Stdin = stdin
		}
		return cmd
	}
	if out, err := run(nil, "/bin/true").CombinedOutput(); err != nil {
		t.Fatalf("--run: %v %s", err, out)
	}
	waitFor(t, "a box of box "+strconv.Itoa(id)+" built ahead", func() bool { return builtAhead(id) })
	before := boxInits(pid)
	// The next run's program waits for its input: its box's init is one
	// the service had started before the run.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	cmd := run(r, "/bin/sh", "-c", "read line")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	var prog int
	waitFor(t, "the program of the second --run", func() bool {
		prog = processOf(id, "sh")
		return prog != 0
	})
	inAhead := false
	for p := prog; p > 1 && !inAhead; p = parentOf(p) {
		inAhead = before[p]
	}
	w.Write([]byte("done\n"))
	w.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the second --run: %v", err)
	}
	if !inAhead {
		t.Errorf("the second --run's program (pid %d) ran in a box built for the run, not in the one the service built ahead (its inits before the run: %v)", prog, before)
	}
}

// processState is a process's umask and RLIMIT_STACK, as /proc shows them.
func processState(t *testing.T, pid int) (umask, stack string) {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			umask = strings.TrimSpace(v)
		}
	}
	limits, err := os.Open("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	defer limits.Close()
	sc := bufio.NewScanner(limits)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "Max stack size") {
			stack = strings.Join(strings.Fields(sc.Text()), " ")
		}
	}
	if umask == "" || stack == "" {
		t.Fatalf("process %d: no umask (%q) or stack limit (%q) in /proc", pid, umask, stack)
	}
	return umask, stack
}

// The ioi form's runs in the service leave its umask and RLIMIT_STACK as
// they were: the program gets ioi/isolate's default stack (the hard
// limit) from its own limits, not from a raised one of the service's.
func TestIOIRunsLeaveTheServiceProcessAlone(t *testing.T) {
	needRoot(t)
	const id = 947
	svc := ownService(t)
	machineBox(t, id)
	pid := svc.cmd.Process.Pid
	// A soft stack limit below the hard one, so that raising it shows.
	var lim unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_STACK, nil, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max != unix.RLIM_INFINITY && lim.Max < 16<<20 {
		t.Skipf("the hard stack limit (%d) leaves no room below it", lim.Max)
	}
	lim.Cur = 8 << 20
	if err := unix.Prlimit(pid, unix.RLIMIT_STACK, &lim, nil); err != nil {
		t.Fatal(err)
	}
	umask, stack := processState(t, pid)
	want := "unlimited"
	if lim.Max != unix.RLIM_INFINITY {
		want = strconv.FormatUint(lim.Max/1024, 10)
	}
	for range 3 {
		cmd := exec.Command(isolateBin, "-b", strconv.Itoa(id), "--run", "--", "/bin/sh", "-c", "ulimit -s")
		cmd.Env = handoverEnv(svc.cliSock)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("--run: %v", err)
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("the program's ulimit -s is %q, want %q (the hard limit)", got, want)
		}
	}
	// The runs were the service's: its pool built the box's next box.
	waitFor(t, "a box of box "+strconv.Itoa(id)+" built ahead", func() bool { return builtAhead(id) })
	if u, s := processState(t, pid); u != umask || s != stack {
		t.Errorf("after the ioi form's runs the service has umask %s and %q, before: umask %s and %q", u, s, umask, stack)
	}
}

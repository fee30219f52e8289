package main

// What a program can leave for the host around its run: a tree
// too deep for a recursive walk, a /box filled past its size, names of
// isolate's locks taken from inside. Box ids 370-379.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
)

// deepChain is a program making a 25 000-level chain of directories in
// /box (relative steps: no path gets long).
const deepChain = "import os\nfor _ in range(25000):\n    os.mkdir('d'); os.chdir('d')\nopen('leaf', 'w').write('x')\n"

func TestDeepTreeInPersistentBox(t *testing.T) {
	root := ioiBoxRoot(t)
	ioiBox(t, 370)
	// RLIMIT_NOFILE below the chain's depth: a walk holding a descriptor
	// per level fails. (prlimit: Go restores its own soft limit in children.)
	run := func(args ...string) result {
		t.Helper()
		cmd := append([]string{"prlimit", "--nofile=256:256", isolateBin}, args...)
		return isolateCmdPath(t, cmd...)
	}
	if res := run("-b", "370", "--run", "--", "/usr/bin/python3", "-c", deepChain); res.Code != 0 {
		t.Fatalf("making the chain: %d %s", res.Code, res.Stderr)
	}
	// The next run hands the tree back and forth; cleanup removes it.
	if res := run("-b", "370", "--run", "--", "/bin/true"); res.Code != 0 {
		t.Errorf("next run of the box: %d %s", res.Code, res.Stderr)
	}
	if res := run("-b", "370", "--cleanup"); res.Code != 0 {
		t.Errorf("--cleanup: %d %s", res.Code, res.Stderr)
	}
	if _, err := os.Lstat(filepath.Join(root, "370")); !os.IsNotExist(err) {
		t.Errorf("box directory still there after --cleanup: %v", err)
	}
}

// isolateCmdPath runs argv (a wrapper and the binary) like isolateCmd.
func isolateCmdPath(t *testing.T, argv ...string) result {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = os.Environ()
	if d := os.Getenv("ISOLATE_COVERDIR"); d != "" {
		cmd.Env = append(cmd.Env, "GOCOVERDIR="+d)
	}
	return runResult(t, cmd)
}

func TestDeepTreeInExec(t *testing.T) {
	needImage(t, "python")
	rep, code := execSource(t, "main.py", deepChain+"print('done')\n", "", "--lang", "python")
	if code != 0 || rep.Status != isolate.StatusOK || strings.TrimSpace(rep.Run.Stdout) != "done" {
		t.Fatalf("exec: %d %s %+v", code, rep.Status, rep.Last())
	}
	// Nothing of it stays on the host: its /box was on no host path.
	// (The previous code left /run/isolate/exec/PID.X, PID gone, undeletable.)
	ents, _ := os.ReadDir("/run/isolate/exec")
	for _, e := range ents {
		pid, _, _ := strings.Cut(e.Name(), ".")
		if _, err := os.Stat("/proc/" + pid); err != nil {
			t.Errorf("exec box directory left behind: %s", e.Name())
		}
	}
}

// fillBox writes 2 MiB to /box/big and says how the write ended.
const fillBox = "import sys\ntry:\n    open('/box/big', 'wb').write(b'x' * (2 << 20))\n    print('wrote')\nexcept OSError as e:\n    print(e.strerror)\n"

// TestBoxRootIsOneBoundedTmpfs: persistent boxes are directories of one
// tmpfs of box_root_size on the box root, mounted with the first box and
// unmounted with the last: writing past it is ENOSPC in the box, and
// nothing of it stays after `cleanup`. (The configuration is the test's
// own, so the runs stay in-process.)
func TestBoxRootIsOneBoundedTmpfs(t *testing.T) {
	needRoot(t)
	root := filepath.Join(t.TempDir(), "boxes")
	cfg := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(cfg, []byte("box_root = "+root+"\nbox_root_size = 1024\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ISOLATE_CONFIG", cfg)
	for _, id := range []string{"371", "374"} {
		if res := isolateCmd(t, "", "init", "--box-id", id); res.Code != 0 {
			t.Fatalf("init %s: %d %s", id, res.Code, res.Stderr)
		}
		t.Cleanup(func() { isolateCmd(t, "", "cleanup", "--box-id", id) })
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil || fs.Type != unix.TMPFS_MAGIC || fs.Blocks*uint64(fs.Bsize) != 1<<20 {
		t.Fatalf("the box root is not a 1 MiB tmpfs (type %#x, %d bytes, %v)", fs.Type, fs.Blocks*uint64(fs.Bsize), err)
	}
	var a, b unix.Stat_t
	if unix.Stat(filepath.Join(root, "371", "box"), &a) != nil || unix.Stat(filepath.Join(root, "374", "box"), &b) != nil || a.Dev != b.Dev {
		t.Errorf("two boxes on two file systems (%d, %d)", a.Dev, b.Dev)
	}
	rep, _ := runBox(t, "--box-id", "371", "--", "/usr/bin/python3", "-c", fillBox)
	if got := strings.TrimSpace(rep.Stdout); got != "No space left on device" {
		t.Errorf("writing 2 MiB into a 1 MiB box root: %q", got)
	}
	if fi, err := os.Stat(filepath.Join(root, "371", "box", "big")); err != nil || fi.Size() > 1<<20 {
		t.Errorf("box/big: %v %v", fi, err)
	}
	// cleanup removes the directory; the last one unmounts the root.
	for _, id := range []string{"371", "374"} {
		if res := isolateCmd(t, "", "cleanup", "--box-id", id); res.Code != 0 {
			t.Fatalf("cleanup %s: %d %s", id, res.Code, res.Stderr)
		}
		if _, err := os.Lstat(filepath.Join(root, id)); !os.IsNotExist(err) {
			t.Errorf("box directory %s left: %v", id, err)
		}
		mounted := unix.Statfs(root, &fs) == nil && fs.Type == unix.TMPFS_MAGIC
		if mounted != (id == "371") {
			t.Errorf("after cleanup of %s: box root mounted %v", id, mounted)
		}
	}
}

func TestExecBoxIsABoundedTmpfs(t *testing.T) {
	needImage(t, "python")
	rep, _ := execSource(t, "main.py", fillBox, "", "--lang", "python", "--tmp-size", "1M")
	if rep.Run == nil || strings.TrimSpace(rep.Run.Stdout) != "No space left on device" {
		t.Errorf("writing 2 MiB into exec's 1 MiB /box: %+v", rep.Last())
	}
}

func TestBoxCannotTakeLockNames(t *testing.T) {
	// The old lock names, abstract sockets a box with --net host could
	// bind; and the lock directory, which no box sees.
	squat := "import socket, time, sys\nfor n in ['box/372', 'pbox/372']:\n    s = socket.socket(socket.AF_UNIX); s.bind('\\0isolate/' + n); globals()[n] = s\nprint('bound', flush=True)\ntime.sleep(3)\n"
	dir := shareDir(t)
	out := filepath.Join(dir, "out")
	squatter := exec.Command(isolateBin, "run", "--net", "host", "-w", "10", "--stdout", out, "--", "/usr/bin/python3", "-c", squat)
	if err := squatter.Start(); err != nil {
		t.Fatal(err)
	}
	// It ends by itself (killing isolate would leave its cgroup).
	defer squatter.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if data, _ := os.ReadFile(out); strings.Contains(string(data), "bound") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the squatter never bound the names")
		}
	}
	rep, code := runBox(t, "--box-id", "372", "--", "/bin/ls", isolate.LockDir)
	if code != 1 || rep.Status != isolate.StatusRE {
		t.Errorf("a run of box 372 while a box holds the old names, listing %s: %d %s %q", isolate.LockDir, code, rep.Status, rep.Message)
	}
	ioiBoxRoot(t)
	if res := isolateCmd(t, "", "-b", "372", "--init"); res.Code != 0 {
		t.Errorf("--init of box 372: %d %s", res.Code, res.Stderr)
	}
	isolateCmd(t, "", "-b", "372", "--cleanup")
}

func TestIoiProcIsTheBoxsOwn(t *testing.T) {
	ioiBoxRoot(t)
	ioiBox(t, 373)
	// The box's procfs lists only the box's processes; the host's has PID 1.
	for _, rule := range []string{"/proc", "/proc:rw"} {
		_, res := ioiMeta(t, "-b", "373", "-d", rule, "--run", "--", "/bin/ls", "/proc/1")
		if res.Code == 0 {
			t.Errorf("-d %s: /proc/1 (a host process) is visible in the box: %q", rule, res.Stdout)
		}
	}
	if res := isolateCmd(t, "", "-b", "373", "-d", "/hp=/proc", "--run", "--", "/bin/true"); res.Code != 2 {
		t.Errorf("-d /hp=/proc: exit %d, want a usage error", res.Code)
	}
}

func TestBadReportPathIsAUsageErrorBeforeTheRun(t *testing.T) {
	dir := shareDir(t)
	out := filepath.Join(dir, "out")
	decoy := filepath.Join(dir, "decoy")
	os.WriteFile(decoy, []byte("decoy\n"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(decoy, link)
	for _, flag := range []string{"--report", "--meta"} {
		for _, path := range []string{filepath.Join(dir, "missing", "r"), link} {
			os.Remove(out)
			res := isolateCmd(t, "", "run", flag, path, "--stdout", out, "--", "/bin/echo", "ran")
			if res.Code != 2 {
				t.Errorf("%s %s: exit %d, want 2", flag, path, res.Code)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s %s: the program ran", flag, path)
			}
		}
	}
	if data, _ := os.ReadFile(decoy); string(data) != "decoy\n" {
		t.Errorf("the decoy behind the link was written: %q", data)
	}
}

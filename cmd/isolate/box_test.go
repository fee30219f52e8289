package main

// Persistent boxes: isolate init/cleanup (and the ioi form's --init and
// --cleanup), what persists, who owns it, and what a program cannot do to
// the caller through it. Box ids 350-369.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
)

func TestBoxInitAndCleanup(t *testing.T) {
	needRoot(t)
	root := ioiBoxRoot(t)
	res := isolateCmd(t, "", "init", "--box-id", "350")
	dir := filepath.Join(root, "350")
	if res.Code != 0 || res.Stdout != dir+"\n" {
		t.Fatalf("init: exit %d stdout %q stderr %q", res.Code, res.Stdout, res.Stderr)
	}
	fi, err := os.Stat(filepath.Join(dir, "box"))
	if err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("box/: %v %v", fi, err)
	}
	// init again resets the box, as ioi/isolate 2.x does.
	os.WriteFile(filepath.Join(dir, "box", "old"), nil, 0o644)
	if res := isolateCmd(t, "", "-b", "350", "--init"); res.Code != 0 || res.Stdout != dir+"\n" {
		t.Fatalf("--init again: %d %q", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "box", "old")); !os.IsNotExist(err) {
		t.Errorf("--init kept an old file")
	}
	for i := 0; i < 2; i++ { // idempotent
		if res := isolateCmd(t, "", "cleanup", "--box-id", "350"); res.Code != 0 {
			t.Fatalf("cleanup: %d %q", res.Code, res.Stderr)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("cleanup left %s", dir)
		}
	}
	// A half-made box: a directory without box/, with leftovers.
	os.MkdirAll(filepath.Join(dir, "tmp", "x"), 0o755)
	os.Symlink("/etc", filepath.Join(dir, "link"))
	if m, res := ioiMeta(t, "-b", "350", "--run", "--", "/bin/true"); res.Code != 2 || m["status"] != "XX" {
		t.Errorf("run in a half-made box: %d %v", res.Code, m)
	}
	if res := isolateCmd(t, "", "-b", "350", "--cleanup"); res.Code != 0 {
		t.Fatalf("--cleanup of a half-made box: %d %q", res.Code, res.Stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("--cleanup left a half-made box")
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("cleanup followed a link: %v", err)
	}
	for _, args := range [][]string{{"init"}, {"init", "--box-id", "1000"}, {"cleanup", "--box-id", "350", "extra"}} {
		if res := isolateCmd(t, "", args...); res.Code != 2 || !strings.HasPrefix(res.Stderr, "isolate: ") {
			t.Errorf("%q: exit %d %q", args, res.Code, res.Stderr)
		}
	}
}

func TestBoxPersistsAndChangesHands(t *testing.T) {
	needRoot(t)
	ioiBoxRoot(t)
	dir := ioiBox(t, 351)
	box := filepath.Join(dir, "box")
	// The caller fills box/ (root-owned files); the program may change
	// them, because box/ is the box user's during a run.
	os.WriteFile(filepath.Join(box, "input"), []byte("from caller\n"), 0o644)
	script := `cp input copy && cat copy >> input && mkdir -p d && echo made > d/f && ln -s /etc/passwd link && mkfifo fifo`
	_, res := ioiMeta(t, "-b", "351", "-p4", "--run", "--", "/bin/sh", "-c", script)
	if res.Code != 0 {
		t.Fatalf("run: %d %q %q", res.Code, res.Stdout, res.Stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(box, "input")); string(got) != "from caller\nfrom caller\n" {
		t.Errorf("input after the run: %q", got)
	}
	// After the run: everything is the caller's again, and the link and
	// FIFO the program made are gone.
	filepath.Walk(box, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s owned by %d:%d after the run", p, st.Uid, st.Gid)
		}
		return nil
	})
	for _, name := range []string{"link", "fifo"} {
		if _, err := os.Lstat(filepath.Join(box, name)); !os.IsNotExist(err) {
			t.Errorf("special file %s survived the run", name)
		}
	}
	// The next run sees what the last one left.
	if _, res := ioiMeta(t, "-b", "351", "--run", "--", "/bin/cat", "d/f"); res.Stdout != "made" {
		t.Errorf("second run reads %q", res.Stdout)
	}
	// --special-files keeps them.
	ioiMeta(t, "-b", "351", "--special-files", "--run", "--", "/bin/ln", "-s", "input", "kept")
	if target, err := os.Readlink(filepath.Join(box, "kept")); err != nil || target != "input" {
		t.Errorf("--special-files: %q %v", target, err)
	}
}

func TestBoxRedirectionsStayInTheBox(t *testing.T) {
	needRoot(t)
	ioiBoxRoot(t)
	dir := ioiBox(t, 352)
	box := filepath.Join(dir, "box")
	victimDir := shareDir(t)
	victim := filepath.Join(victimDir, "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o644)
	// A program plants links (kept with --special-files) that would point
	// the next run's root-opened redirections at a host file.
	plant := `ln -s ` + victim + ` abs && ln -s ../../../../../../../../` + victim + ` rel && mkfifo fifo`
	if _, res := ioiMeta(t, "-b", "352", "-p4", "--special-files", "--run", "--", "/bin/sh", "-c", plant); res.Code != 0 {
		t.Fatalf("plant: %d %q", res.Code, res.Stderr)
	}
	for _, args := range [][]string{
		{"-o", "abs"}, {"-o", "rel"}, {"-r", "abs"}, {"-i", "rel"}, {"-o", "/box/rel"},
	} {
		m, res := ioiMeta(t, append(append([]string{"-b", "352", "--special-files"}, args...), "--run", "--", "/bin/echo", "overwritten")...)
		if got, _ := os.ReadFile(victim); string(got) != "precious\n" {
			t.Fatalf("%q: the host file became %q", args, got)
		}
		if res.Code != 2 || m["status"] != "XX" || !strings.Contains(m["message"], "open(") {
			t.Errorf("%q: exit %d meta %v", args, res.Code, m)
		}
	}
	// A FIFO the program left is opened as in ioi/isolate's box: the
	// wait for a writer ends with the wall limit.
	if m, res := ioiMeta(t, "-b", "352", "--special-files", "-i", "fifo", "-w", "0.5", "--run", "--", "/bin/echo", "overwritten"); res.Code != 1 || m["status"] != "TO" || !strings.Contains(m["message"], "wall") {
		t.Errorf("-i fifo: exit %d meta %v, want a wall-clock TO", res.Code, m)
	}
	// Only what the box can see can be redirected, and only writably
	// where the box could write.
	if m, res := ioiMeta(t, "-b", "352", "-i", "/proc/1/environ", "--run", "--", "/bin/true"); res.Code != 2 || m["status"] != "XX" {
		t.Errorf("-i outside any rule: %d %v", res.Code, m)
	}
	if m, res := ioiMeta(t, "-b", "352", "-o", "/usr/out", "--run", "--", "/bin/true"); res.Code != 2 || !strings.Contains(m["message"], "Read-only") {
		t.Errorf("-o on a read-only rule: %d %v", res.Code, m)
	}
	// -i, -o, -r are relative to /box even with -c.
	os.WriteFile(filepath.Join(box, "in"), []byte("3\n"), 0o644)
	os.Mkdir(filepath.Join(box, "sub"), 0o755)
	if _, res := ioiMeta(t, "-b", "352", "-c", "sub", "-i", "in", "-o", "out", "-r", "/box/sub/err", "--run", "--", "/bin/cat"); res.Code != 0 {
		t.Fatalf("redirections: %d %q", res.Code, res.Stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(box, "out")); string(got) != "3\n" {
		t.Errorf("out = %q", got)
	}
	if _, err := os.Stat(filepath.Join(box, "sub", "err")); err != nil {
		t.Errorf("-r /box/sub/err: %v", err)
	}
}

// boxLockHeld tells whether some isolate holds persistent box id: whether
// /proc/locks lists a lock on its lock file (looking, not trying to lock,
// which could make the holder fail).
func boxLockHeld(id int) bool {
	var st unix.Stat_t
	if unix.Stat(filepath.Join(isolate.LockDir, "pbox-"+strconv.Itoa(id)), &st) != nil {
		return false
	}
	inode := fmt.Sprintf(":%d ", st.Ino)
	data, _ := os.ReadFile("/proc/locks")
	return strings.Contains(string(data), inode)
}

func TestBoxBusyAndWait(t *testing.T) {
	needRoot(t)
	ioiBoxRoot(t)
	ioiBox(t, 353)
	pd := ioiProbe(t)
	first := exec.Command(isolateBin, "-b", "353", "-d", "/t="+pd, "--run", "--", "/t/probe", "sleep", "3")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	// A guard, not a measurement: the first run takes the box at once.
	for deadline := time.Now().Add(30 * time.Second); !boxLockHeld(353); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			first.Process.Kill()
			first.Wait()
			t.Fatal("the first run never took the box")
		}
	}
	if res := isolateCmd(t, "", "-b", "353", "--run", "--", "/bin/true"); res.Code != 2 || !strings.Contains(res.Stderr, "in use") {
		t.Errorf("second run of a busy box: %d %q", res.Code, res.Stderr)
	}
	if res := isolateCmd(t, "", "-b", "353", "--cleanup"); res.Code != 2 {
		t.Errorf("cleanup of a busy box: %d %q", res.Code, res.Stderr)
	}
	if res := isolateCmd(t, "", "-b", "353", "--wait", "--run", "--", "/bin/true"); res.Code != 0 {
		t.Errorf("--wait: %d %q", res.Code, res.Stderr)
	}
	if err := first.Wait(); err != nil {
		t.Errorf("first run: %v", err)
	}
}

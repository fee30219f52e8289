package main

// What the root supervisor does on the host around a run, with
// paths the program controls. Decoy files only.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/isolate"
)

// decoy writes a root-owned file that must never change.
func decoy(t *testing.T, dir, name string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("DECOY\n"), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, mode)
	return p
}

func expectDecoy(t *testing.T, p string) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil || string(got) != "DECOY\n" {
		t.Errorf("decoy %s changed: %q %v", p, got, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil || st.Uid != 0 {
		t.Errorf("decoy %s: owner %d %v", p, st.Uid, err)
	}
}

// writableDir is a directory the box user can write, bound rw as /w.
func writableDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(shareDir(t), "w")
	os.Mkdir(d, 0o777)
	os.Chmod(d, 0o777)
	return d
}

func TestCopyOutReadsAsBoxUser(t *testing.T) {
	dir := shareDir(t)
	data := filepath.Join(dir, "data")
	os.Mkdir(data, 0o755)
	secret := decoy(t, data, "secret", 0o600)
	out := shareDir(t)
	for _, target := range []string{"/data/secret", "/proc/kmsg", "/proc/kallsyms", "/proc/1/maps", "/dev/zero"} {
		leak := filepath.Join(out, "leak")
		os.Remove(leak)
		rep, code := runBoxReturns(t, "--bind", data+":/data", "--copy-out", "/box/out:"+leak,
			"--", "/bin/ln", "-s", target, "/box/out")
		if got, err := os.ReadFile(leak); err == nil && len(got) > 0 {
			t.Errorf("copy-out of a symlink to %s gave %d bytes on the host", target, len(got))
		}
		if rep.Status != isolate.StatusXX || code != 2 || !strings.Contains(rep.Message, "/box/out") {
			t.Errorf("copy-out of a symlink to %s: %s %q exit %d, want XX naming /box/out, exit 2", target, rep.Status, rep.Message, code)
		}
	}
	expectDecoy(t, secret)
}

func TestHostDestinationsNeverFollowSymlinks(t *testing.T) {
	w := writableDir(t)
	victims := shareDir(t)
	d1, d2, d3, d4 := decoy(t, victims, "d1", 0o644), decoy(t, victims, "d2", 0o644), decoy(t, victims, "d3", 0o644), decoy(t, victims, "d4", 0o644)
	os.Mkdir(filepath.Join(victims, "vdir"), 0o755)
	// One run plants symlinks where the next run's outputs go, and where
	// its own copy-outs go.
	script := strings.Join([]string{
		"ln -s " + d1 + " /w/stdout", "ln -s " + d2 + " /w/stderr", "ln -s " + d3 + " /w/copy",
		"mkdir /w/tree", "ln -s " + d4 + " /w/tree/f", "ln -s " + filepath.Join(victims, "vdir") + " /w/tree2",
		"echo evil > /box/f", "mkdir /box/d; echo evil > /box/d/f",
	}, "; ")
	rep, code := runBox(t, "--bind", w+":/w:rw",
		"--copy-out", "/box/f:"+filepath.Join(w, "copy"),
		"--copy-out", "/box/d:"+filepath.Join(w, "tree"),
		"--copy-out", "/box/d:"+filepath.Join(w, "tree2"),
		"--", "/bin/sh", "-c", script)
	if rep.Status != isolate.StatusXX || code != 2 {
		t.Errorf("copy-out onto planted symlinks: %s %q exit %d, want XX", rep.Status, rep.Message, code)
	}
	if _, err := os.Stat(filepath.Join(victims, "vdir", "f")); err == nil {
		t.Errorf("a directory copy-out followed a planted symlink to a host directory")
	}
	// The front end opens them before the run: refused, exit 2.
	res := isolateCmd(t, "", "run", "--json", "--stdout", filepath.Join(w, "stdout"), "--stderr", filepath.Join(w, "stderr"),
		"--", "/bin/sh", "-c", "echo evil; echo evil >&2")
	if res.Code != 2 || !strings.Contains(res.Stderr, "symbolic link") {
		t.Errorf("--stdout/--stderr onto symlinks a previous run planted: exit %d %q, want 2", res.Code, res.Stderr)
	}
	res = isolateCmd(t, "", "run", "--json", "--stderr", filepath.Join(w, "stderr"), "--", "/bin/sh", "-c", "echo evil >&2")
	if res.Code != 2 || !strings.Contains(res.Stderr, "symbolic link") {
		t.Errorf("--stderr onto a symlink a previous run planted: exit %d %q, want 2", res.Code, res.Stderr)
	}
	for _, d := range []string{d1, d2, d3, d4} {
		expectDecoy(t, d)
	}
}

// runBoxReturns is runBox for runs that once hung isolate past every
// limit: it fails the test, instead of hanging it, if isolate has not
// returned long after the run's own limits.
func runBoxReturns(t *testing.T, args ...string) (*isolate.Report, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, isolateBin, append([]string{"run", "--json", "-w", "2"}, args...)...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("isolate run %v did not return", args)
	}
	var rep isolate.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("no report: %v %q", err, stdout.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return &rep, code
}

func TestCopyOutFIFOReturns(t *testing.T) {
	out := shareDir(t)
	rep, code := runBoxReturns(t, "--copy-out", "/box/f:"+filepath.Join(out, "f"), "--", "/usr/bin/mkfifo", "/box/f")
	if rep.Status != isolate.StatusXX || code != 2 || !strings.Contains(rep.Message, "FIFO") {
		t.Errorf("copy-out of a FIFO: %s %q exit %d, want XX naming the FIFO", rep.Status, rep.Message, code)
	}
}

func TestCopyOutSparseAndBounded(t *testing.T) {
	out := filepath.Join(shareDir(t), "d")
	rep, _ := runBox(t, "--copy-out", "/box/d:"+out, "--", "/bin/sh", "-c",
		"mkdir d; for i in 1 2 3 4; do echo x > d/s$i; truncate -s 63M d/s$i; done")
	expectStatus(t, rep, isolate.StatusOK)
	for i := 1; i <= 4; i++ {
		var st syscall.Stat_t
		p := filepath.Join(out, "s"+string(rune('0'+i)))
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != 63<<20 || st.Blocks*512 > 1<<20 {
			t.Errorf("%s: size %d, %d bytes allocated: want 63 MiB, sparse", p, st.Size, st.Blocks*512)
		}
	}
	// Data beyond the bound (--tmp-size) is a failure, not a copy.
	dir := shareDir(t)
	rep, code := runBox(t, "--tmp-size", "8M", "--copy-out", "/box/a:"+filepath.Join(dir, "a"), "--copy-out", "/tmp/b:"+filepath.Join(dir, "b"),
		"--", "/bin/sh", "-c", "head -c 6M /dev/urandom > /box/a; head -c 6M /dev/urandom > /tmp/b")
	if rep.Status != isolate.StatusXX || code != 2 || !strings.Contains(rep.Message, "limit") {
		t.Errorf("12 MB copied out with an 8 MB bound: %s %q exit %d, want XX", rep.Status, rep.Message, code)
	}
}

func TestCopyOutHardLinksOnce(t *testing.T) {
	out := filepath.Join(shareDir(t), "d")
	rep, _ := runBox(t, "--copy-out", "/box/d:"+out, "--", "/bin/sh", "-c",
		"mkdir -p d/x; echo X > d/a; ln d/a d/b; ln d/a d/x/c")
	expectStatus(t, rep, isolate.StatusOK)
	a, err := os.Stat(filepath.Join(out, "a"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"b", "x/c"} {
		if fi, err := os.Stat(filepath.Join(out, n)); err == nil && !os.SameFile(a, fi) {
			t.Errorf("hard link %s was copied again instead of linked", n)
		}
	}
}

func TestCopyInNeverOntoBoundFiles(t *testing.T) {
	dir := shareDir(t)
	victim := decoy(t, dir, "devnull", 0o666) // writable by all, like /dev/null
	src := filepath.Join(dir, "src")
	os.WriteFile(src, []byte("evil\n"), 0o644)
	dev := filepath.Join(dir, "null")
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, int(1<<8|3)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ bind, to string }{{victim + ":/box/dn:rw", "/box/dn"}, {dev + ":/box/null:rw", "/box/null"}} {
		rep, code := runBox(t, "--bind", c.bind, "--copy-in", src+":"+c.to, "--", "/bin/true")
		if rep.Status != isolate.StatusXX || code != 2 || !strings.Contains(rep.Message, "--copy-in") {
			t.Errorf("--copy-in onto %s: %s %q exit %d, want XX", c.bind, rep.Status, rep.Message, code)
		}
	}
	expectDecoy(t, victim)
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("the decoy device was chowned: %d:%d %v", st.Uid, st.Gid, err)
	}
}

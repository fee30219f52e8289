package main

// Host paths a caller names: destinations resolved with no symlink in any
// component, --report and --meta written through the descriptors opened
// before the run, bind sources opened as the caller and bound from that
// descriptor, names of descriptors meaning only the caller's own 0, 1, 2.
// Box ids 380-389.

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
)

// emptyDir fails the test if dir holds anything.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("%s/%s was written through a symlink", dir, e.Name())
	}
}

// A symlink in a directory of a destination, not only in its last
// component, is never followed: each option is refused, exit 2, with its
// name in the message, and nothing lands behind the link.
func TestDestinationDirectorySymlinksRefused(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	victims := filepath.Join(dir, "victims")
	os.Mkdir(victims, 0o700)
	os.Symlink(victims, filepath.Join(dir, "link"))
	behind := func(name string) string { return filepath.Join(dir, "link", name) }
	for _, c := range []struct {
		option string
		args   []string
	}{
		{"--stdout", []string{"--stdout", behind("out")}},
		{"--stderr", []string{"--stderr", behind("err")}},
		{"--copy-out", []string{"--copy-out", "/box/f:" + behind("copy")}},
		{"--copy-out", []string{"--copy-out", "/box/d:" + behind("tree")}},
		{"--report", []string{"--report", behind("report.json")}},
		{"--meta", []string{"--meta", behind("meta")}},
	} {
		args := append([]string{"run"}, c.args...)
		args = append(args, "--", "/bin/sh", "-c", "echo x; echo y >&2; echo f > f; mkdir d; echo g > d/g")
		res := isolateCmd(t, "", args...)
		if res.Code != 2 || !strings.Contains(res.Stderr, "symbolic link") || !strings.Contains(res.Stderr, filepath.Join(dir, "link")) {
			t.Errorf("%s through a symlinked directory: exit %d, stderr %q: want 2, naming the link", c.option, res.Code, res.Stderr)
		}
	}
	// The ioi form's -M is a host path too.
	ioiBoxRoot(t)
	ioiBox(t, 380)
	res := isolateCmd(t, "", "-b", "380", "-M", behind("meta"), "--run", "--", "/bin/true")
	if res.Code != 2 || !strings.Contains(res.Stderr, "symbolic link") {
		t.Errorf("ioi -M through a symlinked directory: exit %d, stderr %q: want 2", res.Code, res.Stderr)
	}
	emptyDir(t, victims)
	// A relative path resolves from the caller's directory, whatever
	// symlinks lead to that directory.
	cmd := exec.Command(isolateBin, "run", "--report", "r.json", "--meta", "m", "--stdout", "o", "--", "/bin/echo", "hi")
	cmd.Dir = filepath.Join(dir, "link")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("relative destinations in a directory entered through a symlink: %v %s", err, out)
	}
	for _, name := range []string{"r.json", "m", "o"} {
		if _, err := os.Stat(filepath.Join(victims, name)); err != nil {
			t.Errorf("relative %s: %v", name, err)
		}
	}
}

// The program replaces the directory of --report, --meta and the ioi
// form's -M (in a read-write bind) with a symlink to a root-only
// directory while it runs: the files are written through the descriptors
// opened before the run, into the directory as it was; root writes
// nothing behind the symlink.
func TestReportDirectorySwappedDuringRun(t *testing.T) {
	needRoot(t)
	w := writableDir(t)
	victims := filepath.Join(shareDir(t), "root-only")
	os.Mkdir(victims, 0o700)
	swap := "mv /w/out /w/moved && ln -s " + victims + " /w/out"
	reset := func() {
		os.RemoveAll(filepath.Join(w, "moved"))
		os.Remove(filepath.Join(w, "out"))
		os.Mkdir(filepath.Join(w, "out"), 0o777)
		os.Chmod(filepath.Join(w, "out"), 0o777)
	}
	reset()
	out := filepath.Join(w, "out")
	res := isolateCmd(t, "", "run", "--bind", w+":/w:rw", "--report", filepath.Join(out, "report.json"),
		"--meta", filepath.Join(out, "meta"), "--", "/bin/sh", "-c", swap)
	if res.Code != 0 {
		t.Fatalf("the swapping run: exit %d, stderr %q", res.Code, res.Stderr)
	}
	var rep isolate.Report
	data, err := os.ReadFile(filepath.Join(w, "moved", "report.json"))
	if err != nil || json.Unmarshal(data, &rep) != nil || rep.Status != isolate.StatusOK {
		t.Errorf("the report in the directory opened before the run: %v %q", err, data)
	}
	if meta, err := os.ReadFile(filepath.Join(w, "moved", "meta")); err != nil || !strings.Contains(string(meta), "exitcode:0") {
		t.Errorf("the meta file in the directory opened before the run: %v %q", err, meta)
	}
	emptyDir(t, victims)

	ioiBoxRoot(t)
	ioiBox(t, 381)
	reset()
	res = isolateCmd(t, "", "-b", "381", "-p", "-d", "/w="+w+":rw", "-M", filepath.Join(out, "meta"), "--run", "--", "/bin/sh", "-c", swap)
	if res.Code != 0 {
		t.Fatalf("the swapping ioi run: exit %d, stderr %q", res.Code, res.Stderr)
	}
	if meta, err := os.ReadFile(filepath.Join(w, "moved", "meta")); err != nil || !strings.Contains(string(meta), "exitcode:0") {
		t.Errorf("ioi: the meta file in the directory opened before the run: %v %q", err, meta)
	}
	emptyDir(t, victims)
}

// A bind's source is checked by what it is, not by how it is spelt: the
// host's /proc, /sys or /dev under any name (a double slash, "..", a
// symlink, or a directory holding its mount, bound recursively) is
// refused, in the native form and the ioi form's -d; so is a symlink
// anywhere in the path, and a name of a descriptor.
func TestBindSourceByWhatItIs(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	os.Symlink("/proc", filepath.Join(dir, "proc-link"))
	os.Mkdir(filepath.Join(dir, "real"), 0o755)
	os.WriteFile(filepath.Join(dir, "real", "f"), []byte("real\n"), 0o644)
	os.Symlink(dir, filepath.Join(dir, "dir-link"))
	for _, src := range []string{"//proc", "/dev/../proc", "/proc/self/..", "/proc/sys", filepath.Join(dir, "proc-link"), "/sys",
		cgroupMount(t), "/dev", "/dev/pts", "/proc/self/fd/0", "/dev/fd/3", filepath.Join(dir, "dir-link", "real"), "/"} {
		res := isolateCmd(t, "", "run", "--bind", src+":/hp", "--", "/bin/ls", "/hp")
		if res.Code != 2 || !strings.Contains(res.Stderr, "bind "+src) {
			t.Errorf("--bind %s: exit %d, stdout %.100q, stderr %q: want refused, exit 2", src, res.Code, res.Stdout, res.Stderr)
		}
	}
	rep, _ := runBox(t, "--bind", filepath.Join(dir, "real")+":/hp", "--", "/bin/cat", "/hp/f")
	if rep.Status != isolate.StatusOK || rep.Stdout != "real\n" {
		t.Errorf("a plain bind: %s %q %q", rep.Status, rep.Message, rep.Stdout)
	}
	ioiBoxRoot(t)
	ioiBox(t, 382)
	for _, src := range []string{"//proc", "/dev/../proc", filepath.Join(dir, "proc-link"), "/sys"} {
		if _, res := ioiMeta(t, "-b", "382", "-d", "/hp="+src, "--run", "--", "/bin/ls", "/hp/1"); res.Code == 0 {
			t.Errorf("-d /hp=%s: the host's kernel interface is bound: %q", src, res.Stdout)
		}
	}
}

// cgroupMount is where a cgroup file system is mounted on the host.
func cgroupMount(t *testing.T) string {
	t.Helper()
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 2 && (f[2] == "cgroup2" || f[2] == "cgroup") {
			return f[1]
		}
	}
	t.Fatal("no cgroup file system mounted")
	return ""
}

// A non-root caller through the service: a bind source it may read is
// bound from the descriptor it opened, so a symlink swapped in meanwhile
// (here, all the time) never binds what the symlink names (a root-only
// directory); names of descriptors other than 0, 1, 2 are the service's
// own, and refused.
func TestCallersBindAndDescriptorsThroughService(t *testing.T) {
	needRoot(t)
	const group = 64124
	svc := ownService(t, "--socket-group", strconv.Itoa(group))
	dir := shareDir(t)
	// What the box user may read and the caller may not: the caller owns
	// it, with no rights for its owner.
	secret := filepath.Join(dir, "secret")
	os.Mkdir(secret, 0o755)
	os.WriteFile(filepath.Join(secret, "f"), []byte("SECRET\n"), 0o644)
	for _, p := range []string{filepath.Join(secret, "f"), secret} {
		os.Chown(p, 65534, 65534)
		os.Chmod(p, 0o005)
	}
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	os.Chown(work, 65534, 65534)
	pub := filepath.Join(work, "pub")
	os.Mkdir(pub, 0o755)
	os.WriteFile(filepath.Join(pub, "f"), []byte("public\n"), 0o644)
	os.Symlink(secret, filepath.Join(work, "swap"))
	os.Chown(pub, 65534, 65534)
	os.Chown(filepath.Join(pub, "f"), 65534, 65534)
	// asCallerTo runs isolate as the caller, its stdout the file out.
	asCallerTo := func(out *os.File, args ...string) result {
		cmd := exec.Command(isolateBin, args...)
		cmd.Env = handoverEnv(svc.cliSock)
		cmd.Dir = work
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{group}}}
		var outb, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &outb, &errb
		if out != nil {
			cmd.Stdout = out
		}
		cmd.Run()
		return result{Stdout: outb.String(), Stderr: errb.String(), Code: cmd.ProcessState.ExitCode()}
	}
	asCaller := func(args ...string) result { return asCallerTo(nil, args...) }
	// pub and the symlink swap places until the runs are over.
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			unix.Renameat2(unix.AT_FDCWD, pub, unix.AT_FDCWD, filepath.Join(work, "swap"), unix.RENAME_EXCHANGE)
		}
	}()
	var bound int
	for i := 0; i < 40; i++ {
		res := asCaller("run", "--json", "--bind", pub+":/pub", "--", "/bin/cat", "/pub/f")
		if strings.Contains(res.Stdout, "SECRET") {
			t.Errorf("run %d bound root's directory through the swapped symlink: %q", i, res.Stdout)
		}
		if res.Code == 0 {
			bound++
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d of 40 runs bound the directory; the others met the symlink and were refused", bound)
	if bound == 0 {
		t.Errorf("no run bound the caller's own directory")
	}

	// Descriptors: the caller's own 1 is its stdout; the service's others
	// are refused.
	stdout := filepath.Join(work, "stdout")
	out, err := os.Create(stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	os.Chown(stdout, 65534, 65534)
	res := asCallerTo(out, "run", "--copy-out", "/box/f:/dev/stdout", "--", "/bin/sh", "-c", "echo mine > f")
	if got, _ := os.ReadFile(stdout); res.Code != 0 || string(got) != "mine\n" {
		t.Errorf("--copy-out to the caller's /dev/stdout: exit %d, stdout %q, stderr %q", res.Code, got, res.Stderr)
	}
	for _, args := range [][]string{
		{"run", "--copy-out", "/box/f:/proc/self/fd/3", "--", "/bin/sh", "-c", "echo evil > f"},
		{"run", "--stdout", "/dev/fd/4", "--", "/bin/echo", "evil"},
		{"run", "--stderr", "/proc/self/fd/5", "--", "/bin/echo", "evil"},
		{"run", "--bind", "/proc/self/fd/0:/x", "--", "/bin/true"},
	} {
		res := asCaller(args...)
		if res.Code != 2 || !strings.Contains(res.Stderr, "descriptor") {
			t.Errorf("%q: exit %d, stderr %q: want refused, naming the descriptor", args, res.Code, res.Stderr)
		}
	}
	if strings.Contains(svc.log(), "evil") {
		t.Errorf("the box wrote into the service's descriptors")
	}
}

// A source bound recursively from a shared mount is a private copy: a
// bind mounted under it in the box never propagates to the host.
func TestBindOfSharedMountStaysInTheBox(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	shared := filepath.Join(dir, "shared")
	os.Mkdir(shared, 0o755)
	if err := unix.Mount("tmpfs", shared, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(shared, unix.MNT_DETACH)
	if err := unix.Mount("", shared, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(shared, "sub"), 0o755)
	other := filepath.Join(dir, "other")
	os.Mkdir(other, 0o755)
	os.WriteFile(filepath.Join(other, "f"), []byte("other\n"), 0o644)
	rep, _ := runBox(t, "--bind", shared+":/s", "--bind", other+":/s/sub", "--", "/bin/cat", "/s/sub/f")
	if rep.Status != isolate.StatusOK || rep.Stdout != "other\n" {
		t.Errorf("nested binds: %s %q %q", rep.Status, rep.Message, rep.Stdout)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), filepath.Join(shared, "sub")) {
		unix.Unmount(filepath.Join(shared, "sub"), unix.MNT_DETACH)
		t.Errorf("a bind in the box propagated to the host's %s", filepath.Join(shared, "sub"))
	}
}

// A caller whose working directory the service cannot name by a path (a
// mount of the caller's own namespace) still has its relative paths
// resolved from that directory, through the descriptor it passed.
func TestRelativePathsFromADirectoryOnlyTheCallerSees(t *testing.T) {
	needRoot(t)
	svc := ownService(t)
	mnt := filepath.Join(shareDir(t), "mnt")
	os.Mkdir(mnt, 0o755)
	script := "mount -t tmpfs caller-only " + mnt + " && cd " + mnt + " && mkdir d && " + isolateBin +
		" run --report d/r.json --stdout d/o --copy-out /box/f:d/f -- /bin/sh -c 'echo hi; echo f > f' && cat d/o d/f d/r.json"
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "/bin/sh", "-c", script)
	cmd.Env = handoverEnv(svc.cliSock)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	var rep isolate.Report
	text, ok := strings.CutPrefix(string(out), "hi\nf\n")
	if err != nil || !ok || json.Unmarshal([]byte(text), &rep) != nil {
		t.Fatalf("relative paths in the caller's own mount: %v\nstdout: %s\nstderr: %s", err, out, errb.String())
	}
	if rep.Status != isolate.StatusOK || rep.Sandbox.Via != "service" {
		t.Errorf("report %+v: want OK via the service", rep)
	}
}

// The API's binds (a root caller's) go through the same open: the host's
// /proc under another name is refused, a plain directory is bound.
func TestAPIBindSourceByWhatItIs(t *testing.T) {
	needRoot(t)
	svc := ownService(t)
	dir := shareDir(t)
	os.WriteFile(filepath.Join(dir, "f"), []byte("plain\n"), 0o644)
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(svc.dir, "api.sock"))
	}}}
	post := func(host, file string) string {
		body := `{"commands":[{"args":["/bin/cat","/hp/` + file + `"],"binds":[{"host":"` + host + `","box":"/hp"}]}]}`
		resp, err := client.Post("http://isolate/v1/run", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return string(out)
	}
	for _, src := range []string{"//proc", "/dev/../proc", "/proc/1/.."} {
		if out := post(src, "self/status"); !strings.Contains(out, `"status":"XX"`) || !strings.Contains(out, "procfs") {
			t.Errorf("API bind of %s: %s", src, out)
		}
	}
	if out := post(dir, "f"); !strings.Contains(out, `"status":"OK"`) || !strings.Contains(out, `plain\n`) {
		t.Errorf("API bind of a plain directory: %s", out)
	}
}

// Host sources the caller names (--copy-in, --stdin) follow no symlink
// either: a link planted where a source goes never makes root read what
// it names. The caller's own standard input named as a file is its own.
func TestSourcesNeverFollowSymlinks(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	os.Mkdir(filepath.Join(dir, "real"), 0o755)
	os.WriteFile(filepath.Join(dir, "real", "f"), []byte("F\n"), 0o644)
	os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "link"))
	os.Symlink("/etc/shadow", filepath.Join(dir, "shadow"))
	for _, args := range [][]string{
		{"--copy-in", filepath.Join(dir, "shadow") + ":/box/s", "--", "/bin/cat", "s"},
		{"--copy-in", filepath.Join(dir, "link", "f") + ":/box/s", "--", "/bin/cat", "s"},
		{"--stdin", filepath.Join(dir, "link", "f"), "--", "/bin/cat"},
		{"--stdin", filepath.Join(dir, "shadow"), "--", "/bin/cat"},
	} {
		res := isolateCmd(t, "", append([]string{"run"}, args...)...)
		if res.Code != 2 || !strings.Contains(res.Stderr, "symbolic link") || strings.Contains(res.Stdout, "root:") {
			t.Errorf("%q: exit %d, stdout %.80q, stderr %q: want refused, naming the link", args, res.Code, res.Stdout, res.Stderr)
		}
	}
	in := filepath.Join(dir, "in")
	os.WriteFile(in, []byte("mine\n"), 0o644)
	stdin, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	cmd := exec.Command(isolateBin, "run", "--copy-in", "/dev/stdin:/box/in", "--", "/bin/cat", "in")
	cmd.Stdin = stdin
	out, err := cmd.Output()
	if err != nil || string(out) != "mine\n" {
		t.Errorf("--copy-in of the caller's /dev/stdin (a file): %v, stdout %q", err, out)
	}
}

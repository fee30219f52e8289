package hostfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fsUIDs reads the file-system uid of every thread of this process.
func fsUIDs(t *testing.T) map[int]int {
	t.Helper()
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	uids := map[int]int{}
	for _, p := range tasks {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		tid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[0] == "Uid:" {
				uids[tid], _ = strconv.Atoi(f[4])
			}
		}
	}
	return uids
}

func TestFSThreadSwitchesOnlyItself(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: switching to another uid")
	}
	const uid = 60999 // a box user's
	var others map[int]int
	var self int
	err := WithFSThread(func(th *FSThread) error {
		if err := th.Become(Cred{UID: uid, GID: uid}); err != nil {
			return err
		}
		self = unix.Gettid()
		others = fsUIDs(t)
		// The credentials hold: a root-only file is refused.
		if _, err := os.ReadFile("/proc/self/environ"); err == nil {
			t.Errorf("as uid %d, root's /proc/self/environ opened", uid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if others[self] != uid {
		t.Errorf("the switching thread has fsuid %d, want %d", others[self], uid)
	}
	for tid, u := range others {
		if tid != self && u != 0 {
			t.Errorf("thread %d has fsuid %d: another thread changed", tid, u)
		}
	}
	for tid, u := range fsUIDs(t) {
		if u != 0 {
			t.Errorf("after the switch, thread %d has fsuid %d", tid, u)
		}
	}
}

func TestOpenOutputRefusesSymlinksAndHangs(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, filepath.Join(dir, "link"))
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "old"), []byte("old contents"), 0o644)
	err := WithFSThread(func(th *FSThread) error {
		open := func(name string, streams bool) error {
			h, err := OpenHostPath(th, OwnCred(), filepath.Join(dir, name))
			if err != nil {
				return err
			}
			defer h.Close()
			f, err := openOutput(th, OwnCred(), h, streams)
			if err == nil {
				f.Close()
			}
			return err
		}
		if err := open("link", streamsAllow); err == nil {
			t.Errorf("an output symlink was followed")
		}
		if err := open("fifo", regularOnly); err == nil {
			t.Errorf("a FIFO was taken where a regular file is meant")
		}
		// No reader: an error at once, not a hang.
		if err := open("fifo", streamsAllow); err == nil {
			t.Errorf("a FIFO without a reader opened")
		}
		if err := open("old", regularOnly); err != nil {
			t.Errorf("a regular file: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the symlink's target changed: %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "old")); fi.Size() != 0 {
		t.Errorf("an existing output was not truncated")
	}
}

func TestCopyDataKeepsHolesAndBounds(t *testing.T) {
	dir := t.TempDir()
	src, _ := os.Create(filepath.Join(dir, "src"))
	defer src.Close()
	src.WriteAt([]byte("head"), 0)
	src.WriteAt([]byte("tail"), 40<<20)
	dst, _ := os.Create(filepath.Join(dir, "dst"))
	defer dst.Close()
	tc := &treeCopy{budget: &Budget{bytes: 1 << 20, files: 1}}
	if err := tc.copyData(int(src.Fd()), int(dst.Fd()), 40<<20+4); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	syscall.Fstat(int(dst.Fd()), &st)
	if st.Size != 40<<20+4 || st.Blocks*512 > 1<<20 {
		t.Errorf("copy of a sparse file: size %d, %d bytes allocated", st.Size, st.Blocks*512)
	}
	buf := make([]byte, 4)
	dst.ReadAt(buf, 40<<20)
	if string(buf) != "tail" {
		t.Errorf("data after the hole: %q", buf)
	}
	src.WriteAt(make([]byte, 2<<20), 1<<20) // 2 MB of data: beyond the bound
	tc = &treeCopy{budget: &Budget{bytes: 1 << 20, files: 1}}
	if err := tc.copyData(int(src.Fd()), int(dst.Fd()), 40<<20+4); err == nil {
		t.Errorf("3 MB copied with a 1 MB bound")
	}
}

// TestDescriptorNames: this process's own caller may name any of its
// descriptors; another process (the service's caller) only 0, 1 and 2,
// which mean the descriptors this process holds for them.
func TestDescriptorNames(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	other := Cred{UID: 65534, GID: 65534, Std: &[3]*os.File{r, w, os.Stderr}}
	own := OwnCred()
	tests := []struct {
		cred       Cred
		path, want string // want "": refused; "-": names no descriptor
	}{
		{own, "/dev/stdout", "/dev/stdout"},
		{own, "/proc/self/fd/7", "/proc/self/fd/7"},
		{own, "/tmp/x", "-"},
		{other, "/dev/stdin", "/proc/self/fd/" + strconv.Itoa(int(r.Fd()))},
		{other, "/dev/fd/1", "/proc/self/fd/" + strconv.Itoa(int(w.Fd()))},
		{other, "/proc/self/fd/2", "/proc/self/fd/2"},
		{other, "/proc/thread-self/fd/1", "/proc/self/fd/" + strconv.Itoa(int(w.Fd()))},
		{other, "/proc/self/fd/3", ""},
		{other, "/dev/fd/10", ""},
		{other, "/proc/self/fd/01", "-"}, // not a name of one: resolved, and refused as a symlink
		{Cred{UID: 65534}, "/dev/stdout", ""},
		{other, "/dev/stdout2", "-"},
	}
	for _, tt := range tests {
		got, ok, err := tt.cred.fdPath(tt.path)
		switch {
		case tt.want == "-" && (ok || err != nil):
			t.Errorf("%s (self %v): names a descriptor? %q %v", tt.path, tt.cred.self, got, err)
		case tt.want == "" && (err == nil || !strings.Contains(err.Error(), "descriptor")):
			t.Errorf("%s (self %v): %q %v, want refused", tt.path, tt.cred.self, got, err)
		case tt.want != "" && tt.want != "-" && (got != tt.want || err != nil):
			t.Errorf("%s (self %v): %q %v, want %q", tt.path, tt.cred.self, got, err, tt.want)
		}
	}
}

// TestOpenNoLinks: a symlink anywhere in a host path is refused, the
// message naming it; a path under the caller's directory descriptor
// (Cred.Dir) resolves from it.
func TestOpenNoLinks(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "real", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "real", "sub", "f"), nil, 0o644)
	os.Symlink("real", filepath.Join(dir, "link"))
	os.Symlink("f", filepath.Join(dir, "real", "sub", "flink"))
	own := OwnCred()
	for path, want := range map[string]string{
		filepath.Join(dir, "real", "sub", "f"):     "",
		filepath.Join(dir, "real", "..", "real"):   "",
		filepath.Join(dir, "link", "sub", "f"):     filepath.Join(dir, "link") + " is a symbolic link",
		filepath.Join(dir, "real", "sub", "flink"): "is a symbolic link (not followed)",
		"/proc/self/fd/0":                          "/proc/self is a symbolic link",
		"/dev/fd/0":                                "/dev/fd is a symbolic link",
	} {
		fd, err := openNoLinks(own, path, unix.O_PATH, 0)
		if fd >= 0 {
			unix.Close(fd)
		}
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	d, err := os.Open(filepath.Join(dir, "real"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := own
	c.Dir = "/proc/self/fd/" + strconv.Itoa(int(d.Fd()))
	fd, err := openNoLinks(c, c.Dir+"/sub/f", unix.O_PATH, 0)
	if err != nil {
		t.Fatalf("a path under the caller's directory descriptor: %v", err)
	}
	unix.Close(fd)
}

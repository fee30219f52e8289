package hostfs

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKernelMountBelow: the root holds the host's /proc; a fresh
// directory holds nothing.
func TestKernelMountBelow(t *testing.T) {
	for dir, refused := range map[string]bool{"/": true, t.TempDir(): false} {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = noKernelMountBelow(fd)
		unix.Close(fd)
		if (err != nil) != refused {
			t.Errorf("%s: %v, want refused %v", dir, err, refused)
		}
	}
}

// The mount table is read again when, and only when, a mount or unmount
// happened since.
func TestMountsFollowChanges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts a tmpfs: needs root")
	}
	before, err := Mounts()
	if err != nil || len(before) == 0 {
		t.Fatalf("mount table: %d mounts, %v", len(before), err)
	}
	// Other processes of the machine may mount meanwhile: a table read
	// twice in a row with no change between is the same slice, at least
	// once in many tries.
	cached := false
	for i := 0; i < 100 && !cached; i++ {
		first, _ := Mounts()
		again, _ := Mounts()
		cached = len(first) > 0 && &again[0] == &first[0]
	}
	if !cached {
		t.Error("the mount table was read again each time")
	}
	dir := t.TempDir()
	has := func(mounts []Mount) bool {
		for _, m := range mounts {
			if m.Point == dir && m.FSType == "tmpfs" {
				return true
			}
		}
		return false
	}
	if err := unix.Mount("isolate-test", dir, "tmpfs", 0, "size=4k"); err != nil {
		t.Fatal(err)
	}
	mounted, err := Mounts()
	unix.Unmount(dir, unix.MNT_DETACH)
	if err != nil || !has(mounted) {
		t.Errorf("a new mount not in the table (%v)", err)
	}
	if after, err := Mounts(); err != nil || has(after) {
		t.Errorf("an unmounted tmpfs still in the table (%v)", err)
	}
}

// The mount table escapes spaces, tabs, newlines and backslashes in
// paths as octal.
func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/var/local/lib/isolate`: "/var/local/lib/isolate",
		`/tmp/a\040b`:            "/tmp/a b",
		`/tmp/x\011y\012z`:       "/tmp/x\ty\nz",
		`/tmp/back\134slash`:     `/tmp/back\slash`,
		`/tmp/end\04`:            `/tmp/end\04`,
		`/x\999`:                 `/x\999`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// A mountinfo line gives the point unescaped, the type, the source and
// the file system's options (a v1 cgroup's controllers) and the mounted
// directory's root, whatever optional fields stand before the separator.
func TestParseMounts(t *testing.T) {
	data := "35 24 0:30 /libpod_parent/libpod-1 /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n" +
		"36 24 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n" +
		"40 24 8:1 / /mnt/a\\040b rw shared:1 master:2 - ext4 /dev/sda1 rw\n" +
		"41 24 8:1 / /short rw - ext4\n"
	want := []Mount{
		{Point: "/sys/fs/cgroup/cpu,cpuacct", FSType: "cgroup", Source: "cgroup", Super: "rw,cpu,cpuacct", Root: "/libpod_parent/libpod-1"},
		{Point: "/sys/fs/cgroup/unified", FSType: "cgroup2", Source: "cgroup2", Super: "rw,nsdelegate", Root: "/"},
		{Point: "/mnt/a b", FSType: "ext4", Source: "/dev/sda1", Super: "rw", Root: "/"},
	}
	got := parseMounts([]byte(data))
	if len(got) != len(want) {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i+1, got[i], want[i])
		}
	}
}

package hostfs

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKernelMountBelow: the root holds the host's /proc; a fresh
// directory holds nothing.
func TestKernelMountBelow(t *testing.T) {
	var mounts []Mount
	for dir, refused := range map[string]bool{"/": true, t.TempDir(): false} {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = noKernelMountBelow(fd, &mounts)
		unix.Close(fd)
		if (err != nil) != refused {
			t.Errorf("%s: %v, want refused %v", dir, err, refused)
		}
	}
	if _, err := os.Stat("/proc/self"); err == nil && len(mounts) == 0 {
		t.Errorf("no mounts read")
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

package isolate

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKernelMountBelow: the root holds the host's /proc; a fresh
// directory holds nothing.
func TestKernelMountBelow(t *testing.T) {
	var mounts []hostMount
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

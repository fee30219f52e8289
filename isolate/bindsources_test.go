package isolate

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`: "/plain", `/a\040b`: "/a b", `/tab\011x\134`: "/tab\tx\\", `/end\04`: `/end\04`, `/x\999`: `/x\999`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

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

package server

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A service sweeps what dead services left, never a live one's files.
func TestSweepWorkSparesLiveServices(t *testing.T) {
	needRoot(t)
	if _, err := workDir(); err != nil {
		t.Fatal(err)
	}
	live, err := os.MkdirTemp(workRoot, "svc-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	// Another live service: its lock is held through a descriptor of
	// its own (flock locks belong to the open file).
	fd, err := unix.Open(live, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	dead, err := os.MkdirTemp(workRoot, "svc-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dead, "req-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A link left in a dead service's files is removed, not followed.
	keep := filepath.Join(t.TempDir(), "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(keep), filepath.Join(dead, "req-1", "link")); err != nil {
		t.Fatal(err)
	}
	if err := SweepWork(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead service's work directory is still there (%v)", err)
	}
	for _, d := range []string{live, processWork.dir, keep} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was swept: %v", d, err)
		}
	}
}

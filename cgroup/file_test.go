package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The control-file helpers on ordinary files: no root needed.
func TestControlFiles(t *testing.T) {
	dir := t.TempDir()
	value := filepath.Join(dir, "pids.max")
	if err := writeFile(value, "max\n"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("writeFile of a missing file: %v, want ErrNotExist", err)
	}
	if err := os.WriteFile(value, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(value, "7\n"); err != nil {
		t.Fatal(err)
	}
	if data, err := readFile(value); err != nil || string(data) != "7\n" {
		t.Errorf("readFile = %q, %v; want \"7\\n\"", data, err)
	}
	// Longer than any first buffer: read to its end.
	procs := filepath.Join(dir, "cgroup.procs")
	long := strings.Repeat("123456\n", 1000)
	if err := os.WriteFile(procs, []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := readFile(procs); err != nil || string(data) != long {
		t.Errorf("readFile of %d bytes: got %d, %v", len(long), len(data), err)
	}

	f, err := openCtl(value, unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	var buf [16]byte
	if data, err := f.read(buf[:]); err != nil || string(data) != "7\n" {
		t.Errorf("read = %q, %v", data, err)
	}
	if err := f.write("9\n"); err != nil {
		t.Fatal(err)
	}
	// Read again from the start: the current value.
	if data, err := f.read(buf[:]); err != nil || string(data) != "9\n" {
		t.Errorf("read again = %q, %v", data, err)
	}
	if _, err := f.read(buf[:1]); err == nil || !strings.Contains(err.Error(), value) {
		t.Errorf("read into a short buffer: %v, want an error naming %s", err, value)
	}
	f.close()
	f.close() // twice is fine
	if _, err := f.read(buf[:]); err != errNotOpen {
		t.Errorf("read after close: %v, want %v", err, errNotOpen)
	}
	// A file kept open from the start fails when used, as it failed to open.
	kept := keepOpen(filepath.Join(dir, "memory.peak"), unix.O_RDONLY)
	if _, err := kept.read(buf[:]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read of a file that failed to open: %v, want ErrNotExist", err)
	}
	if err := kept.write("1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("write of a file that failed to open: %v, want ErrNotExist", err)
	}
	kept.close()
	var zero ctlFile // not open: never stdin
	if _, err := zero.read(buf[:]); err != errNotOpen {
		t.Errorf("read of the zero ctlFile: %v, want %v", err, errNotOpen)
	}
}

// A missing file's error names the path and satisfies
// errors.Is(err, fs.ErrNotExist), as the os package's does.
func TestControlFileMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "memory.peak")
	_, err := readFile(missing)
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, unix.ENOENT) {
		t.Errorf("readFile of a missing file: %v, want ErrNotExist", err)
	}
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("readFile of a missing file: %v, want the path in it", err)
	}
	if _, err := openCtl(missing, unix.O_RDONLY); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("openCtl of a missing file: %v", err)
	}
}

package hostfs

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fifoPath makes a FIFO and returns an O_PATH descriptor of it.
func fifoPath(t *testing.T) (string, int) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return p, fd
}

func plainOpen(path string, flags int) (int, error) { return unix.Open(path, flags, 0) }

// Without the other end, OpenFIFO gives up when its context ends, for a
// reader and for a writer, and leaves nothing blocked behind.
func TestOpenFIFOGivesUp(t *testing.T) {
	for _, flags := range []int{unix.O_RDONLY, unix.O_WRONLY} {
		_, fd := fifoPath(t)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		f, err := OpenFIFO(ctx, fd, flags, plainOpen)
		cancel()
		if f != nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("flags %#x: %v, %v; want the context's error", flags, f, err)
		}
	}
}

// With the other end, the FIFO carries data, and the reader sees the end
// of file when the writer closes.
func TestOpenFIFOMeetsItsPeer(t *testing.T) {
	p, fd := fifoPath(t)
	go func() {
		w, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			w.WriteString("hello")
			w.Close()
		}
	}()
	f, err := OpenFIFO(context.Background(), fd, unix.O_RDONLY, plainOpen)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if data, err := io.ReadAll(f); err != nil || string(data) != "hello" {
		t.Errorf("read %q, %v", data, err)
	}
}

// An open that fails (here: no permission) says why.
func TestOpenFIFOError(t *testing.T) {
	_, fd := fifoPath(t)
	denied := func(string, int) (int, error) { return -1, unix.EACCES }
	if _, err := OpenFIFO(context.Background(), fd, unix.O_RDONLY, denied); !errors.Is(err, unix.EACCES) {
		t.Errorf("error %v, want EACCES", err)
	}
}

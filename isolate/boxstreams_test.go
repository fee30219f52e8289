package isolate

import (
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The box's end of a boxPipe is blocking (a program's standard stream),
// this process's end non-blocking (Go's poller); data flows from the
// writer to the reader either way. No root needed.
func TestBoxPipe(t *testing.T) {
	for _, boxReads := range []bool{true, false} {
		box, here, err := boxPipe(boxReads)
		if err != nil {
			t.Fatal(err)
		}
		// (Fd would make it blocking: ask through SyscallConn.)
		var flags int
		rc, err := box.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) })
		if err != nil || flags&unix.O_NONBLOCK != 0 {
			t.Errorf("boxReads=%v: box end flags %#x (%v), want blocking", boxReads, flags, err)
		}
		// Only a file in the poller takes a deadline.
		if err := here.SetDeadline(time.Time{}); err != nil {
			t.Errorf("boxReads=%v: this process's end is not in the poller: %v", boxReads, err)
		}
		r, w := here, box
		if boxReads {
			r, w = box, here
		}
		if _, err := w.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		w.Close()
		if data, err := io.ReadAll(r); err != nil || string(data) != "hello" {
			t.Errorf("boxReads=%v: read %q, %v", boxReads, data, err)
		}
		r.Close()
	}
}

func TestDevNull(t *testing.T) {
	f, err := devNull(unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := f.Write([]byte("gone")); n != 4 || err != nil {
		t.Errorf("write = %d, %v", n, err)
	}
	if data, err := io.ReadAll(f); err != nil || len(data) != 0 {
		t.Errorf("read = %q, %v", data, err)
	}
}

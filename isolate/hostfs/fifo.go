package hostfs

// A FIFO named as the program's standard input or output. open(2) of a
// FIFO blocks until its other end is opened: that is how two programs
// meet (CMS's Communication task type runs a manager and the user's
// program, each in a box of its own, talking through FIFOs). The wait
// must end when the run's wall-clock limit does, and isolate must never
// hang on it.

import (
	"context"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// OpenFIFO opens, for reading or for writing (flags holds O_RDONLY or
// O_WRONLY), the FIFO that pathFD (an O_PATH descriptor) refers to. It
// blocks as open(2) does until the other end is opened, or until ctx is
// done: then it returns ctx's error. open does the open(2) of the path it
// is given (with the credentials the caller chooses); it may block.
func OpenFIFO(ctx context.Context, pathFD int, flags int, open func(path string, flags int) (int, error)) (*os.File, error) {
	self := "/proc/self/fd/" + strconv.Itoa(pathFD)
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		fd, err := open(self, flags|unix.O_NOCTTY|unix.O_CLOEXEC)
		done <- result{fd, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, r.err
		}
		return os.NewFile(uintptr(r.fd), self), nil
	case <-ctx.Done():
	}
	// A blocked open(2) of a FIFO ends when the other end is opened: be
	// that other end until it has (a writer may only open once a reader
	// is there, so retry until the blocked reader has arrived).
	peer := unix.O_WRONLY
	if flags&unix.O_ACCMODE == unix.O_WRONLY {
		peer = unix.O_RDONLY
	}
	peerFD := -1
	for {
		if peerFD < 0 {
			peerFD, _ = unix.Open(self, peer|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		}
		select {
		case r := <-done:
			if r.err == nil {
				unix.Close(r.fd)
			}
			if peerFD >= 0 {
				unix.Close(peerFD)
			}
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

package isolate

import (
	"os"

	"golang.org/x/sys/unix"
)

// boxPipe makes a pipe between the program (boxEnd: it reads from it
// when boxReads, else writes to it) and this process (here). The box's
// end is blocking, as a program expects of its standard streams, and
// never in Go's poller; this process's end is non-blocking, in the
// poller, so that no thread waits in a read or write for the run's
// length. os.Pipe would make both ends non-blocking and poll both, and
// handing one to init would make it blocking again: about ten system
// calls more per run on its critical path.
func boxPipe(boxReads bool) (boxEnd, here *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	box, ours := p[1], p[0]
	if boxReads {
		box, ours = p[0], p[1]
	}
	// A new pipe has no other status flags to keep.
	if _, err := unix.FcntlInt(uintptr(ours), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(box), "|box"), os.NewFile(uintptr(ours), "|here"), nil
}

// devNull opens /dev/null for the program (flags: unix.O_RDONLY or
// unix.O_RDWR). os.Open would try it in the poller first: four system
// calls more, to learn that it cannot be polled.
func devNull(flags int) (*os.File, error) {
	fd, err := unix.Open(os.DevNull, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: os.DevNull, Err: err}
	}
	return os.NewFile(uintptr(fd), os.DevNull), nil
}

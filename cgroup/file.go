package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Cgroup control files are read and written with plain system calls: an
// *os.File of a kernfs file, which is pollable, costs an epoll_ctl add
// and delete in Go's netpoller per open, and os.ReadFile an fstat more,
// each a few microseconds on a run's critical path.

// maxFileSize bounds what readFile reads: the largest file read whole is a
// cgroup's cgroup.procs, a few bytes per task.
const maxFileSize = 1 << 20

// ctlFile is a control file kept open: reading it again at offset 0 reads
// its current value, writing it sets a new one. The zero ctlFile is not
// open.
type ctlFile struct {
	path string // "" while not open
	fd   int
	err  error // why it could not be opened (keepOpen), told when used
}

var errNotOpen = errors.New("cgroup file not open")

// openCtl opens the control file (or cgroup directory) at path; flags
// are open(2)'s, O_CLOEXEC added.
func openCtl(path string, flags int) (ctlFile, error) {
	fd, err := retry(func() (int, error) { return unix.Open(path, flags|unix.O_CLOEXEC, 0) })
	if err != nil {
		return ctlFile{}, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return ctlFile{path: path, fd: fd}, nil
}

// keepOpen opens the control file at path to use later, as openCtl; a
// file that cannot be opened fails when used.
func keepOpen(path string, flags int) ctlFile {
	f, err := openCtl(path, flags)
	f.err = err
	return f
}

// usable is why f cannot be read or written, if it cannot.
func (f ctlFile) usable() error {
	if f.err != nil {
		return f.err
	}
	if f.path == "" {
		return errNotOpen
	}
	return nil
}

// read reads the file's value into buf, in one call: a value file is one
// record, which the kernel returns whole to a buffer large enough.
func (f ctlFile) read(buf []byte) ([]byte, error) {
	if err := f.usable(); err != nil {
		return nil, err
	}
	n, err := retry(func() (int, error) { return unix.Pread(f.fd, buf, 0) })
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: f.path, Err: err}
	}
	if n == len(buf) {
		return nil, fmt.Errorf("read %s: longer than %d bytes", f.path, len(buf))
	}
	return buf[:n], nil
}

// write sets the file's value.
func (f ctlFile) write(value string) error {
	if err := f.usable(); err != nil {
		return err
	}
	if _, err := retry(func() (int, error) { return unix.Pwrite(f.fd, []byte(value), 0) }); err != nil {
		return &fs.PathError{Op: "write", Path: f.path, Err: err}
	}
	return nil
}

// close closes the file if it is open.
func (f *ctlFile) close() {
	if f.path != "" {
		unix.Close(f.fd)
	}
	*f = ctlFile{}
}

// file hands the descriptor over as an *os.File (to pass to another
// process). A blocking descriptor it did not open itself is one the os
// package neither stats nor adds to the netpoller.
func (f ctlFile) file() *os.File {
	return os.NewFile(uintptr(f.fd), f.path)
}

// readFile reads the whole control file at path.
func readFile(path string) ([]byte, error) {
	f, err := openCtl(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.close()
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= maxFileSize {
				return nil, fmt.Errorf("read %s: longer than %d bytes", path, maxFileSize)
			}
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := retry(func() (int, error) { return unix.Read(f.fd, buf[len(buf):cap(buf)]) })
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// writeFile writes value to the control file at path.
func writeFile(path, value string) error {
	f, err := openCtl(path, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer f.close()
	return f.write(value)
}

// retry calls a system call again that a signal interrupted (a memory
// limit below the usage reclaims, and gives up with EINTR on a signal,
// such as the Go runtime's preemption).
func retry(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != unix.EINTR {
			return n, err
		}
	}
}

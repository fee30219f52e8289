package hostfs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// What a program may get as a standard stream from its caller, whether
// the caller names a path (--stdin FILE), names one of its own
// descriptors (--stdin /dev/stdin, /proc/self/fd/0) or passes its
// descriptors on (the ioi form's inherited streams, a handed-over
// command line's): a regular file on a file system that holds data, a
// pipe or FIFO, a socket, a terminal, or one of the devices every box
// has (null, zero, full, random, urandom). Never a directory (the
// program would reach the host's tree from it with fchdir or openat, as
// the box user), and never a file of a kernel interface (procfs, sysfs,
// cgroupfs...) or another device.

// memDevices are the character devices of major 1 (mem) a stream may
// be, by minor: what the box's own /dev holds.
var memDevices = map[uint32]bool{3: true, 5: true, 7: true, 8: true, 9: true} // null, zero, full, random, urandom

// CheckStreamFD says why fd cannot be a program's standard stream, or
// nil when it can (see above).
func CheckStreamFD(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	return checkStreamStat(fd, &st)
}

// CheckStreamFile is CheckStreamFD of f's descriptor.
func CheckStreamFile(f *os.File) error {
	if f == nil {
		return errors.New("no descriptor")
	}
	return CheckStreamFD(int(f.Fd()))
}

func checkStreamStat(fd int, st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFSOCK:
		return nil
	case unix.S_IFREG:
		var fs unix.Statfs_t
		if err := unix.Fstatfs(fd, &fs); err != nil {
			return err
		}
		if name, ok := pseudoFS[int64(fs.Type)]; ok {
			return fmt.Errorf("is a file of %s, a kernel interface: never a program's stream", name)
		}
		return nil
	case unix.S_IFCHR:
		if unix.Major(st.Rdev) == 1 && memDevices[unix.Minor(st.Rdev)] {
			return nil
		}
		if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
			return nil // a terminal
		}
		return fmt.Errorf("is a character device (%d:%d) that is not a terminal: never a program's stream", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	case unix.S_IFDIR:
		return errors.New("is a directory: never a program's stream")
	}
	return fmt.Errorf("is a %s: never a program's stream", fileKind(st.Mode))
}

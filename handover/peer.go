package handover

import (
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Peer is the process at the other end of a handover: the caller, as the
// kernel knows it.
type Peer struct {
	UID, GID int // effective, when it connected (SO_PEERCRED)
	Groups   []int
}

// peerOf asks the kernel who is at the other end of c: the credentials
// the caller had when it connected, uid and gid (SO_PEERCRED) and
// its supplementary groups (SO_PEERGROUPS, Linux 4.13), both recorded by
// the kernel at connect, so no later change of the caller, and no
// process that reused its PID, can stand in for it.
func peerOf(c *net.UnixConn) (*Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var groups []int
	var sockErr error
	raw.Control(func(fd uintptr) {
		if cred, sockErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); sockErr == nil {
			groups, sockErr = peerGroups(int(fd))
		}
	})
	if sockErr != nil {
		return nil, fmt.Errorf("the caller's credentials: %w", sockErr)
	}
	return &Peer{UID: int(cred.Uid), GID: int(cred.Gid), Groups: groups}, nil
}

// peerGroups reads SO_PEERGROUPS, which x/sys/unix has no getter for: an
// array of gid_t, whose size the kernel reports (ERANGE) when the buffer
// is too small.
func peerGroups(fd int) ([]int, error) {
	buf := make([]uint32, 64)
	for {
		size := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		if errno == unix.ERANGE && int(size/4) > len(buf) {
			buf = make([]uint32, size/4)
			continue
		}
		if errno != 0 {
			return nil, errno
		}
		groups := make([]int, size/4)
		for i := range groups {
			groups[i] = int(buf[i])
		}
		return groups, nil
	}
}

package handover

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Peer is the process at the other end of a handover: the caller, as the
// kernel knows it.
type Peer struct {
	PID      int // in the service's PID namespace
	UID, GID int // effective, when it connected (SO_PEERCRED)
	Groups   []int
}

// peerOf asks the kernel who is at the other end of c. The supplementary
// groups are not in SO_PEERCRED: they are read from /proc/PID/status, and
// a pidfd of the peer itself (SO_PEERPIDFD) proves that PID was still the
// peer, not a process that reused its number, after the read.
func peerOf(c *net.UnixConn) (*Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	pidfd := -1
	var sockErr error
	raw.Control(func(fd uintptr) {
		cred, sockErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if sockErr == nil {
			pidfd, sockErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
		}
	})
	if sockErr != nil {
		return nil, fmt.Errorf("the caller's credentials: %w", sockErr)
	}
	defer unix.Close(pidfd)
	p := &Peer{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid)}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/status")
	if err != nil {
		return nil, fmt.Errorf("the caller's groups: %w", err)
	}
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return nil, errors.New("the caller's groups: the caller is gone")
	}
	if p.Groups, err = statusGroups(status); err != nil {
		return nil, fmt.Errorf("the caller's groups: %w", err)
	}
	return p, nil
}

// statusGroups reads the Groups line of a /proc/PID/status.
func statusGroups(status []byte) ([]int, error) {
	for _, line := range bytes.Split(status, []byte{'\n'}) {
		rest, ok := bytes.CutPrefix(line, []byte("Groups:"))
		if !ok {
			continue
		}
		groups := []int{}
		for _, f := range bytes.Fields(rest) {
			g, err := strconv.Atoi(string(f))
			if err != nil {
				return nil, fmt.Errorf("bad group %q", f)
			}
			groups = append(groups, g)
		}
		return groups, nil
	}
	return nil, errors.New("no Groups line")
}

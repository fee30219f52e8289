// Package caller is who asks the service for a run and what such a caller
// may ask: one Caller value (who: the uid and groups the kernel recorded
// at connect, or a bearer token; how: the HTTP API on the unix socket,
// the CLI's handover, HTTP over TCP, a job from the queue) that every front end builds, and one
// Policy that every front end checks a request against. Front ends hold
// no policy of their own: they build a Caller, call Policy.Check, and
// word its refusal in their own vocabulary (HTTP 403 and the field, or
// the CLI's option and exit status 2). SECURITY.md states the policy as a
// table; a test checks each row against a real service.
package caller

import (
	"fmt"
	"os"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Via is how a caller reached the service.
type Via string

const (
	// Process is this process's own user: the CLI run in-process.
	Process Via = "process"
	// API is the HTTP API on the unix socket (root or --socket-group).
	API Via = "api"
	// Handover is the one-shot CLI handing its run to the service over
	// the CLI socket (root or --socket-group).
	Handover Via = "handover"
	// TCP is the HTTP API on --listen, known by the bearer token only.
	TCP Via = "tcp"
	// Queue is a job taken from a Redis stream (--queue-url): whoever
	// could write to the stream sent it, and nobody vouches for them, so
	// it has a TCP caller's rights.
	Queue Via = "queue"
)

// Caller is who sent a request, and how.
type Caller struct {
	Via Via
	// UID, GID and Groups are the kernel's (SO_PEERCRED, SO_PEERGROUPS,
	// recorded when the caller connected); -1 and none over TCP, where
	// nobody vouches for the caller but its token.
	UID, GID int
	Groups   []int
}

// Unknown is a caller nobody vouches for: not root, in no group.
var Unknown = Caller{Via: TCP, UID: -1, GID: -1}

// QueueJob is the caller of every job taken from the queue: not root, in
// no group.
var QueueJob = Caller{Via: Queue, UID: -1, GID: -1}

// vouched tells whether the kernel says who c is (the unix socket, the
// handover, this process): never over TCP or the queue.
func (c Caller) vouched() bool { return c.Via != TCP && c.Via != Queue }

// Root tells whether the caller has the service's own rights: uid 0 as
// the kernel says (never a TCP caller, whatever its token), or, in a
// service a user who is not root runs for itself, that user, who could
// run anything it asks without the service.
func (c Caller) Root() bool { return c.vouched() && (c.UID == 0 || c.UID == serviceUID) }

// serviceUID is the user this process runs as.
var serviceUID = os.Geteuid()

// InGroup tells whether the caller's gid or a supplementary group is gid.
func (c Caller) InGroup(gid int) bool {
	return c.vouched() && (c.GID == gid || slices.Contains(c.Groups, gid))
}

// String names the caller in messages and logs.
func (c Caller) String() string {
	switch c.Via {
	case TCP:
		return "a TCP caller"
	case Queue:
		return "a queue job"
	}
	return fmt.Sprintf("uid %d (%s)", c.UID, c.Via)
}

// FromSocket is the caller at the other end of the unix socket fd, as the
// kernel recorded it when the caller connected: uid and gid
// (SO_PEERCRED; cred when they were read already, else nil) and
// supplementary groups (SO_PEERGROUPS, Linux 4.13). No later change of
// the caller, and no process that reused its PID, can stand in for it.
func FromSocket(fd int, cred *unix.Ucred, via Via) (Caller, error) {
	if cred == nil {
		var err error
		if cred, err = unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED); err != nil {
			return Unknown, fmt.Errorf("the caller's credentials: %w", err)
		}
	}
	groups, err := peerGroups(fd)
	if err != nil {
		return Unknown, fmt.Errorf("the caller's groups: %w", err)
	}
	return Caller{Via: via, UID: int(cred.Uid), GID: int(cred.Gid), Groups: groups}, nil
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

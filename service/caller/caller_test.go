package caller

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// FromSocket reads the peer's uid, gid and groups as the kernel
// recorded them: over a socket pair, this process's own.
func TestFromSocket(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	c, err := FromSocket(fds[0], nil, Handover)
	if err != nil {
		t.Fatal(err)
	}
	groups, _ := unix.Getgroups()
	slices.Sort(groups)
	slices.Sort(c.Groups)
	if c.Via != Handover || c.UID != unix.Geteuid() || c.GID != unix.Getegid() || !slices.Equal(c.Groups, groups) {
		t.Errorf("%+v, want uid %d gid %d groups %v", c, unix.Geteuid(), unix.Getegid(), groups)
	}
	if c.Root() != (unix.Geteuid() == 0) || (Caller{Via: TCP, UID: 0}).Root() {
		t.Errorf("Root: %v for %+v; a TCP caller is never root", c.Root(), c)
	}
}

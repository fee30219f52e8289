package isolate

import (
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/cgroup"
)

// A box's cgroup is named after its id, and ids are the host's (the box
// locks in LockDir), but cgroups are their root's: while a service under
// another cgroup root holds id N, this root's box-N may be what a
// supervisor killed with SIGKILL left. So a run also claims its cgroup
// under its root: it holds byte N of that root's claims file (a file in
// the lock directory, one per root, never removed) from before box-N is
// made until after it is removed. A sweep removes box-N where it can take
// that byte itself: no run holds that cgroup, whoever holds id N. The
// locks are open file description locks, so that the runs and the sweeps
// of one process exclude each other too, and the kernel drops them with
// their holder.

// boxCgroup is a box's cgroup and its claim: Destroy removes the cgroup,
// then gives the claim up.
type boxCgroup struct {
	*cgroup.Box
	claims *os.File
	id     int
}

func (b *boxCgroup) Destroy() error {
	err := b.Box.Destroy()
	unclaimCgroup(b.claims, b.id)
	return err
}

// openCgroupClaims opens the claims file of m's root in dir: a new open
// file description, whose locks exclude those of every other.
func openCgroupClaims(dir string, m *cgroup.Manager) (*os.File, error) {
	path := claimsPath(dir, m)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err == unix.ENOENT && dir == LockDir {
		if err = makeLockDir(); err == nil {
			fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open cgroup claims %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// claimsPath names the claims file of m's root in dir.
func claimsPath(dir string, m *cgroup.Manager) string {
	parents := slices.Sorted(maps.Values(m.Parents()))
	h := fnv.New64a()
	h.Write([]byte(strings.Join(parents, "\n")))
	return dir + "/cgroups-" + strconv.FormatUint(h.Sum64(), 16)
}

// claimCgroup takes byte id of claims; wait: until it is free (a sweep
// removing a stale box-id holds it for that long), else it reports false
// when someone holds it.
func claimCgroup(claims *os.File, id int, wait bool) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(id), Len: 1}
	cmd := unix.F_OFD_SETLK
	if wait {
		cmd = unix.F_OFD_SETLKW
	}
	for {
		err := unix.FcntlFlock(claims.Fd(), cmd, &lk)
		switch err {
		case nil:
			return true, nil
		case unix.EINTR:
			continue
		case unix.EAGAIN, unix.EACCES:
			return false, nil
		}
		return false, fmt.Errorf("claim cgroup of box %d: %w", id, err)
	}
}

func unclaimCgroup(claims *os.File, id int) {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: int64(id), Len: 1}
	unix.FcntlFlock(claims.Fd(), unix.F_OFD_SETLK, &lk)
}

// claimsFiles are the claims files runs hold their claims in, one per
// lock directory and root, opened once per process (and never closed: a
// Host dropped does not take them with it).
var claimsFiles struct {
	sync.Mutex
	byPath map[string]*os.File
}

// cgroupClaims is the claims file of m's root for the host's runs: the
// process's, found once per Host (its manager never changes).
func (h *Host) cgroupClaims(m *cgroup.Manager) (*os.File, error) {
	if f := h.claims.Load(); f != nil {
		return f, nil
	}
	path := claimsPath(h.lockDir(), m)
	claimsFiles.Lock()
	defer claimsFiles.Unlock()
	f := claimsFiles.byPath[path]
	if f == nil {
		var err error
		if f, err = openCgroupClaims(h.lockDir(), m); err != nil {
			return nil, err
		}
		if claimsFiles.byPath == nil {
			claimsFiles.byPath = map[string]*os.File{}
		}
		claimsFiles.byPath[path] = f
	}
	h.claims.Store(f)
	return f, nil
}

// createBoxCgroup claims box id's cgroup under m and creates it.
func (h *Host) createBoxCgroup(m *cgroup.Manager, id int, limits cgroup.Limits) (*boxCgroup, error) {
	claims, err := h.cgroupClaims(m)
	if err != nil {
		return nil, err
	}
	if _, err := claimCgroup(claims, id, true); err != nil {
		return nil, err
	}
	b, err := m.Create(cgroupName(id), limits)
	if err != nil {
		unclaimCgroup(claims, id)
		return nil, err
	}
	return &boxCgroup{Box: b, claims: claims, id: id}, nil
}

// sweepStale removes the box cgroups under m that no run claims (dir: the
// lock directory): what a supervisor killed with SIGKILL could not remove
// itself. own is the caller's box id, skipped.
func sweepStale(m *cgroup.Manager, dir string, own int) {
	names := m.Boxes()
	if len(names) == 0 {
		return
	}
	claims, err := openCgroupClaims(dir, m)
	if err != nil {
		return
	}
	defer claims.Close()
	for _, name := range names {
		if id, ok := cgroupBoxID(name); ok && id != own {
			removeUnclaimed(m, claims, id)
		}
	}
}

// removeUnclaimed removes box id's cgroup under m if no run claims it.
func removeUnclaimed(m *cgroup.Manager, claims *os.File, id int) error {
	free, err := claimCgroup(claims, id, false)
	if err != nil || !free {
		return err
	}
	defer unclaimCgroup(claims, id)
	return m.Remove(cgroupName(id))
}

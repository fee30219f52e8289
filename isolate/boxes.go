package isolate

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/cgroup"
)

// DefaultNumBoxes is how many box ids there are (0 to DefaultNumBoxes-1)
// unless the configuration's num_boxes says otherwise, as in ioi/isolate.
const DefaultNumBoxes = 1000

// MaxBoxes bounds num_boxes: box N runs as host uid FirstUID+N, which must
// stay a valid uid. (Judge0 uses box ids up to 2^31-1.)
const MaxBoxes = 1 << 31

// FirstUID is the host uid (and gid) of box 0; box N runs as FirstUID+N,
// as in ioi/isolate.
const FirstUID = 60000

// boxUID is the uid (and gid) of the program inside the box's user
// namespace; it maps to FirstUID+id outside.
const boxUID = 1000

// boxLock holds a box id for one run. It is an abstract unix socket bound
// to the id's name: the kernel releases it when the holder dies, however it
// dies, and it leaves nothing on disk.
type boxLock struct {
	id int
	fd int
}

func lockName(id int) string { return "@isolate/box/" + strconv.Itoa(id) }

// tryLock takes box id, or reports false when another run holds it.
func tryLock(id int) (*boxLock, bool, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: lockName(id)}); err != nil {
		unix.Close(fd)
		if err == unix.EADDRINUSE {
			return nil, false, nil
		}
		return nil, false, err
	}
	return &boxLock{id: id, fd: fd}, true, nil
}

// lockBox takes box id, or the first free one below numBoxes when id < 0.
func lockBox(id, numBoxes int) (*boxLock, error) {
	if id >= 0 {
		l, ok, err := tryLock(id)
		if err != nil {
			return nil, fmt.Errorf("lock box %d: %w", id, err)
		}
		if !ok {
			return nil, fmt.Errorf("box %d is in use by another run", id)
		}
		return l, nil
	}
	for i := 0; i < numBoxes; i++ {
		l, ok, err := tryLock(i)
		if err != nil {
			return nil, fmt.Errorf("lock box %d: %w", i, err)
		}
		if ok {
			return l, nil
		}
	}
	return nil, fmt.Errorf("all %d boxes are in use", numBoxes)
}

func (l *boxLock) release() { unix.Close(l.fd) }

// cgroupName is the name of box id's cgroup.
func cgroupName(id int) string { return "box-" + strconv.Itoa(id) }

// sweepStale removes the cgroups of boxes no run holds: what a supervisor
// killed with SIGKILL could not remove itself.
func sweepStale(m *cgroup.Manager, own int) {
	for _, name := range m.Boxes() {
		id, err := strconv.Atoi(strings.TrimPrefix(name, "box-"))
		if err != nil || id == own || !strings.HasPrefix(name, "box-") {
			continue
		}
		l, ok, err := tryLock(id)
		if err != nil || !ok {
			continue
		}
		m.Remove(name)
		l.release()
	}
}

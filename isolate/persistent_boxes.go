package isolate

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/isolate-sandbox/isolate/cgroup"
)

// DefaultNumBoxes is how many box ids there are (0 to DefaultNumBoxes-1)
// unless the configuration's num_boxes says otherwise, as in ioi/isolate.
const DefaultNumBoxes = 1000

// MaxBoxes bounds num_boxes: box N runs as host uid FirstUID+N, which must
// stay a valid uid. (Judge0 uses box ids up to 2^31-1.)
const MaxBoxes = 1 << 31

// MaxBoxID bounds every box id, those isolate picks itself (above
// num_boxes) among them: FirstUID+MaxBoxID is below the invalid uid
// 2^32-1.
const MaxBoxID = 1<<32 - 2 - FirstUID

// DefaultAutoFirstBox is the first box id isolate picks itself (for a run,
// a session or a box built ahead that names none) unless the
// configuration's auto_first_box says otherwise: MaxBoxes, above every id
// a caller may name whatever num_boxes is, so that no judge's id is ever
// taken, also by a service whose configuration differs from the judge's
// (not restarted since num_boxes was raised). Its boxes run as host uids
// from FirstUID+2^31 on: above the subordinate ids useradd hands out
// (to 600100000) and systemd's ranges for dynamic users and containers.
const DefaultAutoFirstBox = MaxBoxes

// DefaultAutoBoxes is how many box ids isolate picks itself from, unless
// the configuration's auto_num_boxes says otherwise.
const DefaultAutoBoxes = 1000

// FirstUID is the host uid (and gid) of box 0; box N runs as FirstUID+N,
// as in ioi/isolate.
const FirstUID = 60000

// boxUID is the uid (and gid) of the program inside the box's user
// namespace; it maps to FirstUID+id outside.
const boxUID = 1000

// boxLock holds a box id for one run (see LockDir).
type boxLock struct {
	id int
	*lock
}

func runLockName(id int) string { return "box-" + strconv.Itoa(id) }

// tryLockBox takes box id (its lock in dir), or reports false when
// another run holds it.
func tryLockBox(dir string, id int) (*boxLock, bool, error) {
	l, ok, err := tryLockIn(dir, runLockName(id))
	if !ok {
		return nil, false, err
	}
	return &boxLock{id: id, lock: l}, true, nil
}

// lockBox takes box id, or when id < 0 the first free one of the n ids
// from first that is not reserved (nil: none is), with the locks in dir.
func lockBox(dir string, id, first, n int, reserved func(int) bool) (*boxLock, error) {
	if id >= 0 {
		l, ok, err := tryLockBox(dir, id)
		if err != nil {
			return nil, fmt.Errorf("lock box %d: %w", id, err)
		}
		if !ok {
			return nil, fmt.Errorf("box %d is in use by another run", id)
		}
		return l, nil
	}
	for i := first; i < first+n; i++ {
		if reserved != nil && reserved(i) {
			continue
		}
		l, ok, err := tryLockBox(dir, i)
		if err != nil {
			return nil, fmt.Errorf("lock box %d: %w", i, err)
		}
		if ok {
			return l, nil
		}
	}
	return nil, fmt.Errorf("all %d boxes isolate picks itself (%d-%d; auto_num_boxes in the configuration raises it) are in use", n, first, first+n-1)
}

// persistentIn tells, for a free id, whether `isolate init` made box id
// under root: a free id is never one of those, so that no run (a box the
// pool builds ahead, a run of a caller who is not root, who may not choose
// ids) holds the id a persistent box's runs need.
func persistentIn(root string) func(int) bool {
	return func(id int) bool {
		fi, err := os.Lstat(filepath.Join(BoxPath(root, id), "box"))
		return err == nil && fi.IsDir()
	}
}

// cgroupName is the name of box id's cgroup.
func cgroupName(id int) string { return "box-" + strconv.Itoa(id) }

// cgroupBoxID is the box id whose cgroup name is (cgroupName's inverse).
func cgroupBoxID(name string) (int, bool) {
	n, ok := strings.CutPrefix(name, "box-")
	id, err := strconv.Atoi(n)
	return id, ok && err == nil
}

// removeStaleCgroups removes box id's cgroups if no run claims them:
// what a supervisor killed with SIGKILL could not remove itself (its
// program is killed with them). Only the cgroups this project makes for
// box id are touched; a host without cgroups has none.
func removeStaleCgroups(cfg *Config, id int) error {
	m, err := cgroup.NewManager(cfg.CgroupRoot)
	if err != nil {
		return nil
	}
	claims, err := openCgroupClaims(LockDir, m)
	if err != nil {
		return err
	}
	defer claims.Close()
	if err := removeUnclaimed(m, claims, id); err != nil {
		return fmt.Errorf("remove the cgroups of box %d: %w", id, err)
	}
	return nil
}

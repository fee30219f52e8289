package isolate

// Persistent boxes, in ioi/isolate's layout: `isolate init` makes
// <root>/<id>/box, whose contents every run of box id sees as /box, and
// `isolate cleanup` removes <root>/<id>; all of them on one file system
// (persistent_boxroot.go). Between runs box/ belongs to the caller, who fills it and
// reads results; during a run it belongs to the box's host uid
// (FirstUID+id), so the program can write it. Each handover
// walks the tree without following a symlink or leaving the file system,
// and drops the symlinks, FIFOs and sockets the program may have planted
// for the caller to trip over (ioi/isolate 2.x does the same), unless the
// caller keeps them on purpose.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/internal/dirent"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// ErrNotInitialized is returned by OpenBox for a box `isolate init` did
// not make (or `isolate cleanup` removed).
var ErrNotInitialized = errors.New("box not initialized")

// Owner is who owns a persistent box's files between runs.
type Owner struct{ UID, GID int }

// Caller is the owner a box gets by default: whoever runs isolate.
func Caller() Owner { return Owner{UID: os.Getuid(), GID: os.Getgid()} }

// BoxPath is the directory of persistent box id under root.
func BoxPath(root string, id int) string { return filepath.Join(root, strconv.Itoa(id)) }

// PersistentBox is an initialized box, held for one operation: init,
// cleanup and runs of the same box exclude each other.
type PersistentBox struct {
	ID   int
	Dir  string // <root>/<id>
	lock *lock  // the management lock
}

func managementLockName(id int) string { return "pbox-" + strconv.Itoa(id) }

// managementLock holds box id's persistent directory for one operation
// (see LockDir). With wait, it waits until the box is free, as
// ioi/isolate's --wait blocks.
func managementLock(id int, wait bool) (*lock, error) {
	if id < 0 || id >= MaxBoxes {
		return nil, usagef("box id %d is out of range (0-%d)", id, MaxBoxes-1)
	}
	name := managementLockName(id)
	if wait {
		return waitLock(name)
	}
	l, ok, err := tryLock(name)
	if err == nil && !ok {
		err = fmt.Errorf("box %d is in use by another process", id)
	}
	return l, err
}

// InitBox makes persistent box id under cfg.BoxRoot, emptying it if it
// existed (as ioi/isolate 2.x does), and returns its directory. Every box
// is a directory of the boxes' one file system (persistent_boxroot.go), mounted on
// the box root with the first box if nothing is mounted there. box/ is
// created mode 0700, owned by owner.
func InitBox(cfg *Config, id int, owner Owner, wait bool) (string, error) {
	l, err := managementLock(id, wait)
	if err != nil {
		return "", err
	}
	defer l.release()
	rl, err := lockBoxRoot(cfg.BoxRoot)
	if err != nil {
		return "", err
	}
	defer rl.release()
	dir := BoxPath(cfg.BoxRoot, id)
	if err := releaseCgroupParents(dir); err != nil {
		return "", err
	}
	if err := removeBox(dir); err != nil {
		return "", fmt.Errorf("reset box directory: %w", err)
	}
	if err := mountBoxRoot(cfg.BoxRoot, cfg.BoxRootSize, id); err != nil {
		return "", err
	}
	if err := makeBox(dir, owner); err != nil {
		removeBox(dir)
		unmountIdleBoxRoot(cfg.BoxRoot)
		return "", err
	}
	holdCgroupParents(cfg, id, dir)
	return dir, nil
}

// holdsFile, in a persistent box's directory (root's, as the file), lists
// the holds of the parents of box cgroups its init made (cgroup.Hold),
// one a line: its runs, often the last box there, then neither make nor
// remove the parents.
const holdsFile = "cgroup-holds"

// holdCgroupParents holds the parents of box cgroups while box id (in
// dir) is initialised. Without cgroups, or should it fail, its runs make
// and remove them as any box's do.
func holdCgroupParents(cfg *Config, id int, dir string) {
	m, err := cgroup.NewManager(cfg.CgroupRoot)
	if err != nil {
		return
	}
	holds, err := m.Hold(cgroupName(id))
	if err != nil {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, holdsFile), []byte(strings.Join(holds, "\n")+"\n"), 0o644); err != nil {
		cgroup.ReleaseHold(holds)
	}
}

// releaseCgroupParents lets go of the holds box dir's init made.
func releaseCgroupParents(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, holdsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var holds []string
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" {
			holds = append(holds, line)
		}
	}
	if err := cgroup.ReleaseHold(holds); err != nil {
		return fmt.Errorf("release the box's cgroup holds: %w", err)
	}
	return nil
}

// makeBox creates dir with box/ in it.
func makeBox(dir string, owner Owner) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create box directory: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		return fmt.Errorf("create box directory: %w", err)
	}
	box := filepath.Join(dir, "box")
	if err := os.Mkdir(box, 0o700); err != nil {
		return fmt.Errorf("create box directory: %w", err)
	}
	if err := os.Chmod(box, 0o700); err != nil {
		return fmt.Errorf("create box directory: %w", err)
	}
	if err := os.Lchown(box, owner.UID, owner.GID); err != nil {
		return fmt.Errorf("hand the box to its owner: %w", err)
	}
	return nil
}

// removeBox removes a persistent box's directory, whatever its depth
// (and unmounts a file system mounted on it first).
func removeBox(dir string) error {
	if err := rootfs.Unmount(dir); err != nil {
		return err
	}
	return RemoveTree(dir)
}

// CleanupBox removes persistent box id, also one left half-made, and the
// cgroups of box id that no run holds (what a supervisor killed with
// SIGKILL left); a box that does not exist is not an error. The boxes'
// file system goes with the last box.
func CleanupBox(cfg *Config, id int, wait bool) error {
	l, err := managementLock(id, wait)
	if err != nil {
		return err
	}
	defer l.release()
	rl, err := lockBoxRoot(cfg.BoxRoot)
	if err != nil {
		return err
	}
	defer rl.release()
	if err := releaseCgroupParents(BoxPath(cfg.BoxRoot, id)); err != nil {
		return err
	}
	if err := removeBox(BoxPath(cfg.BoxRoot, id)); err != nil {
		return fmt.Errorf("remove box directory: %w", err)
	}
	if err := removeStaleCgroups(cfg, id); err != nil {
		return err
	}
	return unmountIdleBoxRoot(cfg.BoxRoot)
}

// OpenBox holds initialized box id for a run; ErrNotInitialized when
// `isolate init` did not make it.
func OpenBox(root string, id int, wait bool) (*PersistentBox, error) {
	l, err := managementLock(id, wait)
	if err != nil {
		return nil, err
	}
	b := &PersistentBox{ID: id, Dir: BoxPath(root, id), lock: l}
	if fi, err := os.Lstat(b.BoxDir()); err != nil || !fi.IsDir() {
		b.Close()
		return nil, ErrNotInitialized
	}
	return b, nil
}

// BoxDir is the host directory bound as /box.
func (b *PersistentBox) BoxDir() string { return filepath.Join(b.Dir, "box") }

// HostUID is the host uid (and gid) the box's program runs as.
func (b *PersistentBox) HostUID() int { return FirstUID + b.ID }

// Enter hands box/ to the box's uid for a run.
func (b *PersistentBox) Enter(keepSpecial bool) error {
	if err := chownTree(b.BoxDir(), b.HostUID(), b.HostUID(), keepSpecial); err != nil {
		return fmt.Errorf("hand box/ to the box user: %w", err)
	}
	return nil
}

// Leave hands box/ back to owner after a run, mode 0700 again: the
// program may have opened it (or a tmp rule's directory) to everyone, and
// any local user could then plant links there for the owner to follow.
func (b *PersistentBox) Leave(owner Owner, keepSpecial bool) error {
	if err := chownTree(b.BoxDir(), owner.UID, owner.GID, keepSpecial); err != nil {
		return fmt.Errorf("hand box/ back to its owner: %w", err)
	}
	if err := closeTmpDirs(filepath.Join(b.Dir, "tmp")); err != nil {
		return fmt.Errorf("close the tmp directories: %w", err)
	}
	return nil
}

// closeTmpDirs makes each directory of tmp rules in dir mode 0700 again
// (they stay the box user's, as in ioi/isolate). dir is root's, so
// nothing in it changes while this looks.
func closeTmpDirs(dir string) error {
	fd, err := unix.Open(dir, dirFlags, 0)
	if err == unix.ENOENT {
		return nil
	} else if err != nil {
		return err
	}
	defer unix.Close(fd)
	names, err := dirent.Names(fd)
	if err != nil {
		return err
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := unix.Fchmodat(fd, name, 0o700, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// TmpDir is the host directory of ioi/isolate's "tmp" directory rule for
// box path name: <dir>/tmp/<name with / as :>, mode 0700, owned by the
// box user. The hierarchy is flat and tmp/ itself belongs to root, so the
// program can never swap one of these directories for a link.
func (b *PersistentBox) TmpDir(name string) (string, error) {
	parent := filepath.Join(b.Dir, "tmp")
	dir := filepath.Join(parent, strings.ReplaceAll(strings.Trim(name, "/"), "/", ":"))
	for _, d := range []struct {
		path string
		mode os.FileMode
		uid  int
	}{{parent, 0o755, 0}, {dir, 0o700, b.HostUID()}} {
		if err := os.Mkdir(d.path, d.mode); err != nil && !os.IsExist(err) {
			return "", fmt.Errorf("create %s: %w", d.path, err)
		}
		if fi, err := os.Lstat(d.path); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("create %s: not a directory", d.path)
		}
		if err := os.Lchown(d.path, d.uid, d.uid); err != nil {
			return "", err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// Close releases the box.
func (b *PersistentBox) Close() {
	if b.lock != nil {
		b.lock.release()
		b.lock = nil
	}
}

// UsePersistent makes a run of spec (by `isolate run --box-id N`) use
// persistent box N when `isolate init` made it: it holds the box, hands
// box/ to the box user and sets spec.BoxDir. finish hands box/ back to the
// caller and releases the box; call it after Run. For a box id with no
// persistent box, or no box id, it does nothing.
func UsePersistent(spec *Spec, cfg *Config) (finish func() error, err error) {
	nothing := func() error { return nil }
	if spec.BoxID < 0 || spec.BoxDir != "" {
		return nothing, nil
	}
	b, err := OpenBox(cfg.BoxRoot, spec.BoxID, false)
	if errors.Is(err, ErrNotInitialized) {
		return nothing, nil
	} else if err != nil {
		return nil, err
	}
	if err := b.Enter(false); err != nil {
		b.Close()
		return nil, err
	}
	spec.BoxDir = b.BoxDir()
	return func() error {
		defer b.Close()
		return b.Leave(Caller(), false)
	}, nil
}

// chownTree gives dir and everything below it to uid:gid, dir itself
// with mode 0700 as `init` made it. It never
// follows a symlink, refuses to cross into another file system, and
// removes what is neither a regular file nor a directory unless
// keepSpecial (see walkTree). Changing the owner also clears set-user-ID
// and set-group-ID bits and file capabilities, so nothing the program
// leaves gains privileges.
func chownTree(dir string, uid, gid int, keepSpecial bool) error {
	fd, err := unix.Open(dir, dirFlags, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	return walkTree(fd, treeVisitor{entry: func(dirfd int, name string, st *unix.Stat_t) (bool, error) {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR, unix.S_IFREG:
		default:
			if !keepSpecial {
				if err := unix.Unlinkat(dirfd, name, 0); err != nil && err != unix.ENOENT {
					return false, fmt.Errorf("remove special file %s: %w", name, err)
				}
				return false, nil
			}
		}
		if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return false, fmt.Errorf("chown %s: %w", name, err)
		}
		return true, nil
	}})
}

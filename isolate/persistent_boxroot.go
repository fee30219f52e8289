package isolate

// The box root: every persistent box is a directory of one file system,
// as in ioi/isolate, so that a judge can rename or hard-link files from one
// box into another (Piston moves a compiled submission/ from the box that
// compiled it to the box that runs it). That file system is a tmpfs that
// `init` mounts on the box root when nothing is mounted there, of
// box_root_size bytes: the bound of what all boxes hold together. It is
// unmounted when `cleanup` removes the last box in it. A file system the
// operator mounted on the box root is used as it is, and never unmounted;
// so is the directory that holds isolate's images, ioi/isolate's package's
// box root (sharedStateDir).

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate/hostfs"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// boxRootSource is the source name of the tmpfs (rootfs.MountTmpfs's)
// in the mount table.
const boxRootSource = "isolate-box"

// lockBoxRoot holds root for a change of what is in it: mounting the file
// system, adding or removing a box, unmounting it once empty. Held for
// milliseconds, after a box's management lock, never before one.
func lockBoxRoot(root string) (*lock, error) {
	h := fnv.New64a()
	h.Write([]byte(realDir(root)))
	return waitLock("pboxroot-" + strconv.FormatUint(h.Sum64(), 16))
}

// realDir is dir with its symlinks resolved (the box root may be a link
// the operator made; the mount table names where it leads), or dir as it
// is while it does not exist.
func realDir(dir string) string {
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		return r
	}
	return dir
}

// topMount is the file system type and source of what is mounted last on
// dir, from this process's mount table; ok is false when nothing is.
func topMount(dir string) (fstype, source string, ok bool, err error) {
	mounts, err := hostfs.Mounts()
	for _, m := range mounts {
		if m.Point == dir {
			fstype, source, ok = m.FSType, m.Source, true
		}
	}
	return fstype, source, ok, err
}

// ownBoxRoot tells whether the file system on root is the one init
// mounted there.
func ownBoxRoot(root string) (bool, error) {
	fstype, source, ok, err := topMount(realDir(root))
	return ok && fstype == "tmpfs" && source == boxRootSource, err
}

// mountBoxRoot makes root the boxes' file system: the operator's if one is
// mounted there, else a tmpfs of size bytes (0: the kernel's default,
// half of memory). Whatever root holds before the mount would be hidden
// under it, so it must hold nothing but boxes no one holds (id is the
// caller's own, held already); those are removed first.
func mountBoxRoot(root string, size int64, id int) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create box root: %w", err)
	}
	root = realDir(root)
	if _, _, mounted, err := topMount(root); err != nil || mounted {
		return err
	}
	if root == realDir(sharedStateDir) {
		// ioi/isolate's package's box root, where isolate's images are
		// too: the boxes are directories of its file system, as ioi's
		// are, beside the images; a tmpfs would hide them.
		return nil
	}
	names, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("read box root: %w", err)
	}
	for _, e := range names {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 0 || strconv.Itoa(n) != e.Name() {
			return fmt.Errorf("box root %s holds %s, which is not a box: move it away (the boxes' file system is mounted there)", root, e.Name())
		}
		if n != id {
			l, free, err := tryLock(managementLockName(n))
			if err != nil {
				return err
			}
			if !free {
				return fmt.Errorf("box root %s holds box %d, which is in use: the boxes' file system cannot be mounted over it now", root, n)
			}
			err = removeBox(filepath.Join(root, e.Name()))
			l.release()
			if err != nil {
				return fmt.Errorf("remove box %d from under the box root: %w", n, err)
			}
		}
	}
	fs, err := rootfs.MountTmpfs(size, 0, 0, 0o755)
	if err != nil {
		return fmt.Errorf("boxes' file system: %w", err)
	}
	if err := fs.AttachAt(root); err != nil {
		fs.Close()
		return fmt.Errorf("boxes' file system: %w", err)
	}
	return nil
}

// unmountIdleBoxRoot unmounts the boxes' tmpfs from root once no box is
// in it; an operator's file system stays.
func unmountIdleBoxRoot(root string) error {
	root = realDir(root)
	ours, err := ownBoxRoot(root)
	if err != nil || !ours {
		return err
	}
	names, err := os.ReadDir(root)
	if err != nil || len(names) > 0 {
		return err
	}
	if err := unix.Unmount(root, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount the boxes' file system: %w", err)
	}
	return nil
}

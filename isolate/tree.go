package isolate

// Walks of trees a program built (a persistent box's box/, exec's /box).
// The program chooses their shape: names, symlinks, special files, and a
// depth in the tens of thousands. So a walk is a loop, not a recursion,
// holds two descriptors whatever the depth (the directory it is in and,
// for a moment, the next one), steps down with openat(O_NOFOLLOW) and up
// with "..", checking that ".." is the directory it came from, and never
// leaves the file system it started on.

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/internal/dirent"
)

// treeVisitor is what a walk does. entry is called for each entry of a
// directory (dirfd), before the walk descends into it; it returns whether
// to descend (directories only). leave is called for a directory once its
// contents are done, with its parent's descriptor.
type treeVisitor struct {
	entry func(dirfd int, name string, st *unix.Stat_t) (descend bool, err error)
	leave func(parentfd int, name string) error
}

// walkFrame is a directory on the walk's path from the top.
type walkFrame struct {
	name     string // in its parent
	dev, ino uint64
	names    []string // its entries
	next     int      // the next entry to visit
}

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// walkTree walks the tree below the open directory top (which stays the
// caller's) with v. A mount point below top is an error: nothing of
// another file system is touched.
func walkTree(top int, v treeVisitor) error {
	fd, err := unix.Openat(top, ".", dirFlags, 0)
	if err != nil {
		return err
	}
	defer func() { unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	dev := st.Dev
	names, err := dirent.Names(fd)
	if err != nil {
		return err
	}
	stack := []walkFrame{{dev: st.Dev, ino: st.Ino, names: names}}
	path := func(name string) string { // for messages: where the walk is
		return fmt.Sprintf("%s (depth %d)", name, len(stack))
	}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next == len(top.names) {
			if len(stack) == 1 {
				return nil
			}
			parent, err := unix.Openat(fd, "..", dirFlags, 0)
			if err != nil {
				return fmt.Errorf("return from %s: %w", path(top.name), err)
			}
			up := stack[len(stack)-2]
			if err := unix.Fstat(parent, &st); err != nil || st.Dev != up.dev || st.Ino != up.ino {
				unix.Close(parent)
				return fmt.Errorf("return from %s: the tree changed during the walk", path(top.name))
			}
			unix.Close(fd)
			fd = parent
			name := top.name
			stack = stack[:len(stack)-1]
			if v.leave != nil {
				if err := v.leave(fd, name); err != nil {
					return err
				}
			}
			continue
		}
		name := top.names[top.next]
		top.next++
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				continue
			}
			return fmt.Errorf("stat %s: %w", path(name), err)
		}
		if st.Dev != dev {
			return fmt.Errorf("%s: unexpected mount point", path(name))
		}
		descend, err := v.entry(fd, name, &st)
		if err != nil {
			return err
		}
		if !descend || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		sub, err := unix.Openat(fd, name, dirFlags, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", path(name), err)
		}
		want := st
		if err := unix.Fstat(sub, &st); err != nil || st.Dev != want.Dev || st.Ino != want.Ino {
			unix.Close(sub)
			return fmt.Errorf("open %s: the tree changed during the walk", path(name))
		}
		names, err := dirent.Names(sub)
		if err != nil {
			unix.Close(sub)
			return fmt.Errorf("read %s: %w", path(name), err)
		}
		unix.Close(fd)
		fd = sub
		stack = append(stack, walkFrame{name: name, dev: st.Dev, ino: st.Ino, names: names})
	}
	return nil
}

// RemoveTree removes path and everything below it, without following a
// symlink and without leaving path's file system (a mount point below it
// is an error, and is left alone). A path that does not exist is not an
// error. path's own parents must be trusted (root's).
func RemoveTree(path string) error {
	fd, err := unix.Open(path, dirFlags, 0)
	switch err {
	case nil:
	case unix.ENOENT:
		return nil
	case unix.ENOTDIR, unix.ELOOP: // a file or a link: remove that, not what it names
		if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		return nil
	default:
		return fmt.Errorf("remove %s: %w", path, err)
	}
	err = emptyDir(fd)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if err := unix.Rmdir(path); err != nil && err != unix.ENOENT {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// emptyDir removes everything below directory fd.
func emptyDir(fd int) error {
	return walkTree(fd, treeVisitor{
		entry: func(dirfd int, name string, st *unix.Stat_t) (bool, error) {
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return true, nil
			}
			if err := unix.Unlinkat(dirfd, name, 0); err != nil && err != unix.ENOENT {
				return false, fmt.Errorf("unlink %s: %w", name, err)
			}
			return false, nil
		},
		leave: func(parentfd int, name string) error {
			if err := unix.Unlinkat(parentfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
				return fmt.Errorf("rmdir %s: %w", name, err)
			}
			return nil
		},
	})
}

// OpenToAll makes everything below directory dir (not dir itself)
// readable, and where its owner may run it runnable, by every uid: exec's
// run may be another box user than its compiler.
func OpenToAll(dir *os.File) error {
	return walkTree(int(dir.Fd()), treeVisitor{entry: func(dirfd int, name string, st *unix.Stat_t) (bool, error) {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR, unix.S_IFREG:
		default:
			return false, nil // a link's mode means nothing; specials stay as they are
		}
		mode := st.Mode&0o777 | 0o444
		if st.Mode&unix.S_IFMT == unix.S_IFDIR || mode&0o100 != 0 {
			mode |= 0o111
		}
		if err := unix.Fchmodat(dirfd, name, mode, 0); err != nil {
			return false, fmt.Errorf("chmod %s: %w", filepath.Join("/box", name), err)
		}
		return true, nil
	}})
}

package isolate

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// LockDir holds the box locks: one file per name, flock'ed by its holder.
// It is root's alone (mode 0700) and no box ever sees it, so a program
// cannot take or hold a lock, whatever it shares with the host (an
// abstract unix socket, the previous scheme, could be bound from a box
// with --net host). The kernel drops a flock with its last descriptor,
// however the holder dies. A holder removes the file when it lets go,
// still holding it: whoever opened that file before it was removed and
// takes the lock then finds that the name no longer leads to the inode
// it locked, and starts again with the name's new file. So the directory
// holds the files of held locks, and those a holder killed with SIGKILL
// left (free, and removed by their next holder).
const LockDir = "/run/isolate/locks"

// lock is a held lock; release drops it.
type lock struct {
	fd   int
	path string
}

// tryLock takes the lock of name, or reports false when someone holds it.
func tryLock(name string) (*lock, bool, error) { return tryLockIn(LockDir, name) }

// tryLockIn is tryLock in dir: LockDir, or the directory of a user who
// is not root (rootless.go).
func tryLockIn(dir, name string) (*lock, bool, error) {
	path := dir + "/" + name
	for {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.ENOENT && dir == LockDir {
			if err = makeLockDir(); err == nil {
				fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			}
		}
		if err != nil {
			return nil, false, fmt.Errorf("open lock %s: %w", path, err)
		}
		lockOpened()
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			if err == unix.EWOULDBLOCK {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("lock %s: %w", path, err)
		}
		// The holder before may have removed the file between the open
		// and the flock: then the lock is of an inode no name leads to.
		var held, named unix.Stat_t
		if err := unix.Fstat(fd, &held); err != nil {
			unix.Close(fd)
			return nil, false, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := unix.Lstat(path, &named); err == nil && named.Dev == held.Dev && named.Ino == held.Ino {
			return &lock{fd: fd, path: path}, true, nil
		} else if err != nil && err != unix.ENOENT {
			unix.Close(fd)
			return nil, false, fmt.Errorf("lock %s: %w", path, err)
		}
		unix.Close(fd)
	}
}

// waitLock takes the lock of name, polling while someone holds it (as
// ioi/isolate's --wait does; a blocking flock could not be given up).
func waitLock(name string) (*lock, error) {
	for {
		l, ok, err := tryLock(name)
		if err != nil || ok {
			return l, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockOpened runs between a lock file's open and its flock (tests put
// another holder's release there).
var lockOpened = func() {}

// release removes the lock's file and lets go of it (see LockDir); once:
// a second call does nothing (the name may lead to another holder's file
// by then).
func (l *lock) release() {
	if l.fd < 0 {
		return
	}
	unix.Unlink(l.path)
	unix.Close(l.fd)
	l.fd = -1
}

// makeLockDir creates LockDir, root's alone, and checks that what is there
// is that directory (not a link planted by someone else).
func makeLockDir() error {
	if err := os.MkdirAll("/run/isolate", 0o755); err != nil {
		return err
	}
	if err := unix.Mkdir(LockDir, 0o700); err != nil && err != unix.EEXIST {
		return fmt.Errorf("create %s: %w", LockDir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(LockDir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o077 != 0 {
		return fmt.Errorf("%s is not a directory of root's alone (mode 0700)", LockDir)
	}
	return nil
}

package isolate

// Host-side opens on someone's behalf. The supervisor is root; every file
// it opens for a run is opened with the rights of whoever the path
// belongs to: the box user for paths inside the box (what the program
// could open itself, nothing more), the caller for the caller's own
// paths. File-system credentials (setfsuid, setfsgid, the supplementary
// groups) are per thread in Linux; they are changed on a locked thread
// and restored before it goes back to the Go scheduler, so no other
// goroutine ever runs with them.

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Cred are the file-system credentials a host-side open runs with.
type Cred struct {
	UID, GID int
	Groups   []int // supplementary groups
}

// ownCred is this process's own credentials: the CLI's caller.
func ownCred() Cred {
	groups, _ := unix.Getgroups()
	return Cred{UID: unix.Geteuid(), GID: unix.Getegid(), Groups: groups}
}

// boxCred is the host identity of box id's program: FirstUID+id, no
// supplementary groups.
func boxCred(id int) Cred { return Cred{UID: FirstUID + id, GID: FirstUID + id} }

// fsThread is an OS thread whose file-system credentials can be switched.
type fsThread struct {
	cur  *Cred
	orig Cred // the thread's own, restored at the end
}

// goFSThread runs fn on a locked OS thread, on which fn may switch the
// file-system credentials (become), and restores them at the end. The
// result arrives on the channel, so a caller can stop waiting at a
// deadline.
func goFSThread(fn func(t *fsThread) error) <-chan error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		t := &fsThread{}
		uid, _ := unix.SetfsuidRetUid(-1)
		gid, _ := unix.SetfsgidRetGid(-1)
		groups, err := unix.Getgroups()
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		t.orig = Cred{UID: uid, GID: gid, Groups: groups}
		t.cur = &t.orig
		err = fn(t)
		// Handed back only as it was. Should that fail, the thread stays
		// locked and the runtime ends it with this goroutine (a thread
		// ending can kill a child started from it with Pdeathsig, which
		// is why the normal path does not rely on that).
		if t.become(t.orig) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return done
}

// withFSThread runs fn on a thread of its own and waits for it.
func withFSThread(fn func(t *fsThread) error) error { return <-goFSThread(fn) }

// become switches the thread's file-system credentials to c. Only the
// calling thread changes: golang.org/x/sys/unix makes plain system calls
// (the C library and the syscall package change every thread).
func (t *fsThread) become(c Cred) error {
	if t.cur != nil && sameCred(*t.cur, c) {
		return nil
	}
	t.cur = nil
	cur, err := unix.Getgroups()
	if err != nil {
		return err
	}
	if !sameGroups(cur, c.Groups) {
		if err := unix.Setgroups(c.Groups); err != nil {
			return fmt.Errorf("switch to uid %d: set groups: %w", c.UID, err)
		}
	}
	unix.SetfsgidRetGid(c.GID)
	unix.SetfsuidRetUid(c.UID)
	// Both report the previous value; an impossible one (-1) only asks.
	gid, _ := unix.SetfsgidRetGid(-1)
	uid, _ := unix.SetfsuidRetUid(-1)
	if uid != c.UID || gid != c.GID {
		return fmt.Errorf("cannot switch to uid %d gid %d", c.UID, c.GID)
	}
	t.cur = &c
	return nil
}

func sameCred(a, b Cred) bool {
	return a.UID == b.UID && a.GID == b.GID && sameGroups(a.Groups, b.Groups)
}

func sameGroups(a, b []int) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// configfsMagic is CONFIGFS_MAGIC (linux/magic.h), which x/sys lacks.
const configfsMagic = 0x62656570

// pseudoFS are the file systems whose files are kernel interfaces, not
// data: never copied, whatever their mode says.
var pseudoFS = map[int64]string{
	unix.PROC_SUPER_MAGIC: "procfs", unix.SYSFS_MAGIC: "sysfs", unix.DEBUGFS_MAGIC: "debugfs",
	unix.TRACEFS_MAGIC: "tracefs", unix.SECURITYFS_MAGIC: "securityfs", unix.CGROUP_SUPER_MAGIC: "cgroup",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2", unix.BPF_FS_MAGIC: "bpf", unix.DEVPTS_SUPER_MAGIC: "devpts",
	unix.PSTOREFS_MAGIC: "pstore", unix.EFIVARFS_MAGIC: "efivarfs", unix.BINFMTFS_MAGIC: "binfmt_misc",
	unix.SELINUX_MAGIC: "selinuxfs", unix.SMACK_MAGIC: "smackfs", unix.NSFS_MAGIC: "nsfs",
	unix.PID_FS_MAGIC: "pidfs", unix.ANON_INODE_FS_MAGIC: "anon_inodefs", configfsMagic: "configfs",
}

// checkFile fstats fd and refuses anything but a regular file (or a
// directory when dirOK) on a file system that holds data.
func checkFile(fd int, dirOK bool) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return st, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		if !dirOK {
			return st, errors.New("is a directory")
		}
	default:
		return st, fmt.Errorf("is a %s, not a regular file", fileKind(st.Mode))
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return st, err
	}
	if name, ok := pseudoFS[int64(fs.Type)]; ok {
		return st, fmt.Errorf("is on %s, a kernel interface", name)
	}
	return st, nil
}

func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFLNK:
		return "symbolic link"
	case unix.S_IFDIR:
		return "directory"
	}
	return "special file"
}

// openErr names what a refused open met.
func openErr(err error) error {
	if errors.Is(err, unix.ELOOP) {
		return errors.New("is a symbolic link (not followed)")
	}
	if errors.Is(err, unix.EXDEV) {
		return errors.New("crosses a mount (not followed)")
	}
	return err
}

// hostPath is a path the caller named for the run: its directory is
// opened with the caller's rights before the program starts, its last
// component is looked up only when it is used, never through a symlink.
type hostPath struct {
	path string
	dir  int // O_PATH descriptor of the directory, or -1
	name string
}

// callerFD reports whether path names one of this process's own open
// descriptors (/dev/stdout, /proc/self/fd/N, ...): the caller's, which
// the magic link reopens; no box can plant anything there.
func callerFD(path string) bool {
	switch path {
	case "/dev/stdin", "/dev/stdout", "/dev/stderr":
		return true
	}
	for _, prefix := range []string{"/proc/self/fd/", "/dev/fd/"} {
		if n, ok := strings.CutPrefix(path, prefix); ok {
			_, err := strconv.Atoi(n)
			return err == nil
		}
	}
	return false
}

// openHostPath opens path's directory with the caller's rights.
func openHostPath(t *fsThread, caller Cred, path string) (*hostPath, error) {
	h := &hostPath{path: path, dir: -1}
	if callerFD(path) {
		return h, nil
	}
	dir, name := dirOf(path), path[strings.LastIndexByte(path, '/')+1:]
	if name == "" || name == "." || name == ".." {
		return nil, fmt.Errorf("%s: names no file", path)
	}
	if err := t.become(caller); err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", dir, err)
	}
	h.dir, h.name = fd, name
	return h, nil
}

func (h *hostPath) close() {
	if h != nil && h.dir >= 0 {
		unix.Close(h.dir)
		h.dir = -1
	}
}

// Output file kinds for openOutput.
const (
	regularOnly  = false
	streamsAllow = true // a FIFO or character device the caller named is fine too
)

// openOutput opens (creating, mode 0644) the host file h for writing with
// the caller's rights. The last component is never followed; an existing
// file must be regular, and is truncated only after that check. With
// streams, a FIFO or character device is accepted too, opened without
// blocking: a FIFO with no reader is an error ("no such device or
// address"), never a hang.
func openOutput(t *fsThread, caller Cred, h *hostPath, streams bool) (*os.File, error) {
	return openCallerFile(t, caller, h, unix.O_WRONLY|unix.O_CREAT, streams)
}

// openInput opens the host file h for reading with the caller's rights,
// under openOutput's rules (nothing created or truncated).
func openInput(t *fsThread, caller Cred, h *hostPath) (*os.File, error) {
	return openCallerFile(t, caller, h, unix.O_RDONLY, streamsAllow)
}

func openCallerFile(t *fsThread, caller Cred, h *hostPath, mode int, streams bool) (*os.File, error) {
	if err := t.become(caller); err != nil {
		return nil, err
	}
	flags := mode | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	var fd int
	var err error
	if h.dir < 0 {
		fd, err = unix.Open(h.path, flags&^unix.O_CREAT, 0)
	} else {
		fd, err = unix.Openat(h.dir, h.name, flags|unix.O_NOFOLLOW, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.path, openErr(err))
	}
	f, err := checkStream(fd, streams)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.path, err)
	}
	return f, nil
}

// checkStream keeps fd if it is a regular file (truncated when opened for
// writing) or, with streams, a FIFO or character device; it then blocks
// again, as the program expects.
func checkStream(fd int, streams bool) (*os.File, error) {
	var st unix.Stat_t
	err := unix.Fstat(fd, &st)
	if err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); fl&unix.O_ACCMODE != unix.O_RDONLY && fl&unix.O_APPEND == 0 {
				err = unix.Ftruncate(fd, 0)
			}
		case unix.S_IFIFO, unix.S_IFCHR:
			if !streams {
				err = fmt.Errorf("is a %s, not a regular file", fileKind(st.Mode))
			}
		default:
			err = fmt.Errorf("is a %s, not a regular file", fileKind(st.Mode))
		}
	}
	if err == nil {
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "output"), nil
}

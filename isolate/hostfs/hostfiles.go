package hostfs

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

// Cred are the file-system credentials a host-side open runs with, and
// what the names of descriptors mean for whoever they are.
type Cred struct {
	UID, GID int
	Groups   []int // supplementary groups
	// Std are the standard descriptors of a caller that is another
	// process (one the service runs for), as this process holds them.
	// The names of descriptors such a caller gives (/dev/stdout,
	// /dev/fd/N, /proc/self/fd/N) would name this process's own: those
	// of 0, 1 and 2 mean these, every other one is refused.
	Std *[3]*os.File
	// Dir, when it names a descriptor of this process (/proc/self/fd/N:
	// how the service names a caller's working directory that no path of
	// its own reaches), is the caller's working directory, held open: a
	// path under it is resolved from that descriptor.
	Dir string
	// self: this process's own credentials (OwnCred): its descriptors are
	// the caller's, and every name of one is taken as it is.
	self bool
}

// OwnCred is this process's own credentials: the CLI's caller.
func OwnCred() Cred {
	groups, _ := unix.Getgroups()
	return Cred{UID: unix.Geteuid(), GID: unix.Getegid(), Groups: groups, self: true}
}

// CredOf is who's credentials, nil: this process's own.
func CredOf(who *Cred) Cred {
	if who != nil {
		return *who
	}
	return OwnCred()
}

// FSThread is an OS thread whose file-system credentials can be switched.
type FSThread struct {
	cur  *Cred
	orig Cred // the thread's own, restored at the end
}

// GoFSThread runs fn on a locked OS thread, on which fn may switch the
// file-system credentials (Become), and restores them at the end. The
// result arrives on the channel, so a caller can stop waiting at a
// deadline.
func GoFSThread(fn func(t *FSThread) error) <-chan error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		t := &FSThread{}
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
		if t.Become(t.orig) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return done
}

// WithFSThread runs fn on a thread of its own and waits for it.
func WithFSThread(fn func(t *FSThread) error) error { return <-GoFSThread(fn) }

// Become switches the thread's file-system credentials to c. Only the
// calling thread changes: golang.org/x/sys/unix makes plain system calls
// (the C library and the syscall package change every thread).
func (t *FSThread) Become(c Cred) error {
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

// HostPath is a path the caller named for the run: its directory is
// opened with the caller's rights before the program starts, its last
// component is looked up only when it is used, never through a symlink.
type HostPath struct {
	path   string
	fdPath string // for a name of a descriptor: what opens it (dir is -1)
	dir    int    // O_PATH descriptor of the directory, or -1
	name   string
}

// fdName tells which descriptor path names, if it names one of this
// process's: /dev/stdin, /dev/stdout, /dev/stderr, /dev/fd/N,
// /proc/self/fd/N, /proc/thread-self/fd/N.
func fdName(path string) (int, bool) {
	switch path {
	case "/dev/stdin":
		return 0, true
	case "/dev/stdout":
		return 1, true
	case "/dev/stderr":
		return 2, true
	}
	for _, prefix := range []string{"/proc/self/fd/", "/dev/fd/", "/proc/thread-self/fd/"} {
		if n, ok := strings.CutPrefix(path, prefix); ok {
			fd, err := strconv.Atoi(n)
			return fd, err == nil && fd >= 0 && strconv.Itoa(fd) == n
		}
	}
	return 0, false
}

// fdPath is what a name of a descriptor opens for c: for this process's
// own credentials the name as it is (the magic link reopens the caller's
// file, where no box can plant anything); for another process its 0, 1
// and 2 as the descriptors this process holds for them. ok is false for
// a path that names no descriptor.
func (c Cred) fdPath(path string) (p string, ok bool, err error) {
	n, ok := fdName(path)
	switch {
	case !ok:
		return "", false, nil
	case c.self:
		return path, true, nil
	case n > 2 || c.Std == nil || c.Std[n] == nil:
		return "", true, fmt.Errorf("%s: names a descriptor of the service, not the caller's (only 0, 1 and 2 may be named)", path)
	}
	return "/proc/self/fd/" + strconv.Itoa(int(c.Std[n].Fd())), true, nil
}

// noLinks is how every host path a caller names is resolved: no symlink
// and no /proc magic link in any of its components.
const noLinks = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openNoLinks opens path with the thread's current credentials,
// following no symlink anywhere in it (noLinks): a relative path from
// this process's directory (or a path under c.Dir from that), an
// absolute one from the root. A refusal names the symlink it met.
func openNoLinks(c Cred, path string, flags int, mode uint32) (int, error) {
	at, rel := c.lookupStart(path)
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: noLinks}
	for try := 0; ; try++ {
		fd, err := unix.Openat2(at, rel, how)
		switch {
		case err == nil:
			return fd, nil
		case (err == unix.EAGAIN || err == unix.EINTR) && try < 16:
			continue // a rename elsewhere raced the lookup
		case err == unix.ELOOP:
			return -1, linkIn(at, rel, path)
		}
		return -1, err
	}
}

// lookupStart is where the lookup of path starts: the descriptor of c.Dir
// for a path under it, else this process's directory (or, for an
// absolute path, the root).
func (c Cred) lookupStart(path string) (int, string) {
	if n, ok := fdName(c.Dir); ok {
		if rest, ok := strings.CutPrefix(path, c.Dir+"/"); ok {
			return n, rest
		}
	}
	return unix.AT_FDCWD, path
}

// linkIn names the first symlink of rel (looked up from at; path as the
// caller named it), for the message of a refused lookup.
func linkIn(at int, rel, path string) error {
	prefix := ""
	if strings.HasPrefix(rel, "/") {
		prefix = "/"
	}
	shown := strings.TrimSuffix(path, rel)
	for _, part := range strings.Split(rel, "/") {
		if part == "" {
			continue
		}
		prefix += part
		var st unix.Stat_t
		if unix.Fstatat(at, prefix, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if prefix == strings.TrimSuffix(rel, "/") {
				return errors.New("is a symbolic link (not followed)")
			}
			return fmt.Errorf("%s is a symbolic link (not followed: name the path without it)", shown+prefix)
		}
		prefix += "/"
	}
	return errors.New("goes through a symbolic link (not followed)")
}

// openSource opens path, a file the caller names to be read (a copy-in
// source, a FIFO as standard input), with flags, as the thread's current
// credentials: a name of a descriptor as fdPath says, any other path with
// no symlink followed (openNoLinks).
func openSource(c Cred, path string, flags int) (int, error) {
	if p, ok, err := c.fdPath(path); err != nil {
		return -1, err
	} else if ok {
		return unix.Open(p, flags|unix.O_CLOEXEC, 0)
	}
	return openNoLinks(c, path, flags, 0)
}

// OpenHostPath opens path's directory with the caller's rights, no
// symlink followed anywhere (openNoLinks).
func OpenHostPath(t *FSThread, caller Cred, path string) (*HostPath, error) {
	h := &HostPath{path: path, dir: -1}
	if p, ok, err := caller.fdPath(path); err != nil {
		return nil, err
	} else if ok {
		h.fdPath = p
		return h, nil
	}
	dir, name := DirOf(path), path[strings.LastIndexByte(path, '/')+1:]
	if name == "" || name == "." || name == ".." {
		return nil, fmt.Errorf("%s: names no file", path)
	}
	if err := t.Become(caller); err != nil {
		return nil, err
	}
	fd, err := openNoLinks(caller, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	h.dir, h.name = fd, name
	return h, nil
}

func (h *HostPath) Close() {
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
func openOutput(t *FSThread, caller Cred, h *HostPath, streams bool) (*os.File, error) {
	return openCallerFile(t, caller, h, unix.O_WRONLY|unix.O_CREAT, streams, 0o644)
}

// openCopyOutput is openOutput of a regular file copied out of the box: a
// file it creates gets the box file's permission bits perm (no set-id or
// sticky bit) under this process's umask, which is the caller's (the
// service takes only callers whose umask is its own); an existing file
// keeps its mode, as with cp.
func openCopyOutput(t *FSThread, caller Cred, h *HostPath, perm uint32) (*os.File, error) {
	return openCallerFile(t, caller, h, unix.O_WRONLY|unix.O_CREAT, regularOnly, perm&0o777)
}

// openInput opens the host file h for reading with the caller's rights,
// under openOutput's rules (nothing created or truncated).
func openInput(t *FSThread, caller Cred, h *HostPath) (*os.File, error) {
	return openCallerFile(t, caller, h, unix.O_RDONLY, streamsAllow, 0)
}

func openCallerFile(t *FSThread, caller Cred, h *HostPath, mode int, streams bool, perm uint32) (*os.File, error) {
	if err := t.Become(caller); err != nil {
		return nil, err
	}
	flags := mode | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	var fd int
	var err error
	if h.dir < 0 {
		fd, err = unix.Open(h.fdPath, flags&^unix.O_CREAT, 0)
	} else {
		fd, err = unix.Openat(h.dir, h.name, flags|unix.O_NOFOLLOW, perm)
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
// writing) or, with streams, a FIFO or character device, within what a
// program's stream may be (CheckStreamFD: no file of a kernel interface,
// no device but a terminal or the box's own); it then blocks again, as
// the program expects.
func checkStream(fd int, streams bool) (*os.File, error) {
	var st unix.Stat_t
	err := unix.Fstat(fd, &st)
	if err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if err = checkStreamStat(fd, &st); err != nil {
				break
			}
			if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); fl&unix.O_ACCMODE != unix.O_RDONLY && fl&unix.O_APPEND == 0 {
				err = unix.Ftruncate(fd, 0)
			}
		case unix.S_IFIFO, unix.S_IFCHR:
			if !streams {
				err = fmt.Errorf("is a %s, not a regular file", fileKind(st.Mode))
			} else {
				err = checkStreamStat(fd, &st)
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

// DirOf is the directory that holds path p (".": a bare name).
func DirOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			if i == 0 {
				return "/"
			}
			return p[:i]
		}
	}
	return "."
}

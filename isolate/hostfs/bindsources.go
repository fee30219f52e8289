package hostfs

// Bind sources. Each host path a run binds is opened with the caller's
// rights (O_PATH, no symlink followed anywhere in it), checked through
// that descriptor (what the caller may read, and write for a read-write
// bind; no kernel interface such as procfs or sysfs, whatever the path
// looks like), and copied as a detached mount (open_tree) that the box's
// init moves into the box: nothing is looked up by its path again, so no
// swap of a directory for a symlink between the check and the mount can
// redirect it.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/rootfs"
)

// BindSource is one bind's source, opened: its detached copy, for init.
// Without root the supervisor may not copy a mount (open_tree needs
// CAP_SYS_ADMIN in the host's mount namespace): after the same checks,
// init binds the path itself, in the user's own namespaces, where a swap
// of the path could give the user nothing the user does not have.
type BindSource struct {
	// Source is the checked source (O_PATH): what the bind is, by device
	// and inode, and what Clone copies.
	Source *os.File
	// Tree is its detached copy for init (Clone), nil until made.
	Tree  *os.File
	Dir   bool
	Path  string // without root: the checked path, bound by init
	noRec bool
}

// HostDevDevice is the device of the host's /dev when that is a devtmpfs
// (which says tmpfs to fstatfs), else 0: every mount of devtmpfs shares
// its one superblock.
func HostDevDevice() (uint64, error) {
	var fs unix.Statfs_t
	var st unix.Stat_t
	if err := unix.Statfs("/dev", &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
		return 0, nil
	}
	if err := unix.Stat("/dev", &st); err != nil {
		return 0, fmt.Errorf("stat /dev: %w", err)
	}
	return st.Dev, nil
}

// OpenBindSource opens b.Host as caller and checks it: Clone then copies
// it for a box. An optional source that does not exist is nil.
func OpenBindSource(t *FSThread, caller Cred, b rootfs.Bind, devDev uint64, byPath bool) (*BindSource, error) {
	if _, ok := fdName(b.Host); ok {
		return nil, errors.New("names a descriptor; a bind takes a file or directory")
	}
	if err := t.Become(caller); err != nil {
		return nil, err
	}
	fd, err := openNoLinks(caller, b.Host, unix.O_PATH, 0)
	if errors.Is(err, unix.ENOENT) && b.Optional {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	kept := false
	defer func() {
		if !kept {
			unix.Close(fd)
		}
	}()
	mode := uint32(unix.R_OK)
	if b.Writable {
		mode |= unix.W_OK
	}
	// AT_EACCESS: the thread's credentials, the caller's.
	if err := unix.Faccessat(fd, "", mode, unix.AT_EMPTY_PATH|unix.AT_EACCESS); err != nil {
		return nil, fmt.Errorf("%w (as uid %d)", err, caller.UID)
	}
	var st unix.Stat_t
	var fs unix.Statfs_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return nil, err
	}
	if name, ok := pseudoFS[int64(fs.Type)]; ok {
		return nil, fmt.Errorf("is on %s, a kernel interface: never bound into a box", name)
	}
	if devDev != 0 && st.Dev == devDev {
		return nil, errors.New("is on the host's /dev (devtmpfs): never bound into a box")
	}
	if err := t.Become(t.orig); err != nil {
		return nil, err
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if isDir && !b.NoRec {
		if err := noKernelMountBelow(fd); err != nil {
			return nil, err
		}
	}
	src := &BindSource{Dir: isDir, noRec: b.NoRec}
	if byPath {
		if src.Path, err = filepath.Abs(b.Host); err != nil {
			return nil, err
		}
	}
	src.Source, kept = os.NewFile(uintptr(fd), b.Host), true
	return src, nil
}

// Clone copies the source as a detached mount (open_tree of its
// descriptor) for init to move into a box, once, as this thread's own
// credentials (the supervisor's). Only a box built from the source needs
// it: a copy closed while still detached is unmounted, which costs the
// kernel an expedited RCU grace period, and those are serialized across
// the machine (a handed-over run of a box built ahead would pay one for
// copies it only compares). With idmap (a user namespace's descriptor),
// the copy is idmapped by that namespace's maps (MOUNT_ATTR_IDMAP): a
// file system that cannot be, here or in a mount below, fails the copy.
func (b *BindSource) Clone(idmap *os.File) error {
	if b.Tree != nil || b.Path != "" {
		return nil
	}
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	if !b.noRec {
		flags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(int(b.Source.Fd()), "", flags)
	if err != nil {
		return fmt.Errorf("copy the mount: %w", err)
	}
	// The copy of a shared mount would share its peer group: a mount
	// under it in the box would then appear on the host.
	attr := &unix.MountAttr{Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(tree)
		return fmt.Errorf("make the copy private: %w", err)
	}
	if idmap != nil {
		flags := uint(unix.AT_EMPTY_PATH)
		if !b.noRec {
			flags |= unix.AT_RECURSIVE
		}
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(idmap.Fd())}
		if err := unix.MountSetattr(tree, "", flags, attr); err != nil {
			unix.Close(tree)
			return fmt.Errorf("its file system (or one mounted below it) cannot be mounted idmapped to the caller's uid (%v): a bind of a caller who is not root is read with the caller's rights or not at all", err)
		}
	}
	b.Tree = os.NewFile(uintptr(tree), "bind:"+b.Source.Name())
	return nil
}

// Close closes the source and its copy.
func (b *BindSource) Close() {
	b.Source.Close()
	if b.Tree != nil {
		b.Tree.Close()
	}
}

// kernelFSTypes are the file systems (as mountinfo names them) whose
// mounts a recursive bind must not bring into a box: kernel interfaces,
// as pseudoFS, and the host's devices and message queues.
var kernelFSTypes = map[string]bool{
	"proc": true, "sysfs": true, "debugfs": true, "tracefs": true, "securityfs": true, "cgroup": true,
	"cgroup2": true, "bpf": true, "devpts": true, "pstore": true, "efivarfs": true, "binfmt_misc": true,
	"selinuxfs": true, "smackfs": true, "nsfs": true, "configfs": true, "devtmpfs": true, "mqueue": true,
	"fusectl": true,
}

// Mount is a line of this process's mountinfo: where, what, its source
// and its file system's options (a cgroup v1 mount's controllers).
type Mount struct {
	Point, FSType, Source, Super string
	// Root is the directory of the file system mounted at Point (a bind
	// mount's, or a cgroup's a container runtime bound there): "/" for
	// the whole.
	Root string
}

// noKernelMountBelow refuses a directory (fd) below which a kernel
// interface is mounted: a recursive bind would bring it into the box.
func noKernelMountBelow(fd int) error {
	dir, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return err
	}
	mounts, err := Mounts()
	if err != nil {
		return err
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for _, m := range mounts {
		if kernelFSTypes[m.FSType] && strings.HasPrefix(m.Point, prefix) {
			return fmt.Errorf("holds the host's %s mount at %s, a kernel interface never bound into a box (bind what the box needs, or a non-recursive bind)", m.FSType, m.Point)
		}
	}
	return nil
}

// mountTable is this process's mount table as last read, and the open
// mountinfo it was read from: reading it costs the kernel a walk of every
// mount, and a service would pay that for each run's binds.
var mountTable struct {
	sync.Mutex
	fd     int // -1 while not open
	mounts []Mount
}

func init() { mountTable.fd = -1 }

// Mounts is this process's mount table, in its order (a mount after one
// on the same point is on top of it). It is read again only when it may
// have changed: the kernel marks an open mountinfo with POLLPRI once a
// mount or unmount happened in the namespace since the mark was last
// polled, and a change after the poll is in the read or marks the next
// poll. The descriptor is a raw one: Go's netpoller would poll an
// *os.File of it too, and take the mark. The slice is shared: never
// modified.
func Mounts() ([]Mount, error) {
	mountTable.Lock()
	defer mountTable.Unlock()
	if mountTable.fd < 0 {
		fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: "/proc/self/mountinfo", Err: err}
		}
		mountTable.fd = fd
	} else {
		fds := []unix.PollFd{{Fd: int32(mountTable.fd), Events: unix.POLLPRI}}
		if n, err := unix.Poll(fds, 0); err == nil && n == 0 {
			return mountTable.mounts, nil
		}
	}
	data, err := readAllAt(mountTable.fd)
	if err != nil {
		unix.Close(mountTable.fd)
		mountTable.fd = -1
		return nil, fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	mountTable.mounts = parseMounts(data)
	return mountTable.mounts, nil
}

// readAllAt reads the file fd whole, from its start.
func readAllAt(fd int) ([]byte, error) {
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Pread(fd, buf[len(buf):cap(buf)], int64(len(buf)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// parseMounts parses the lines of a mountinfo.
func parseMounts(data []byte) []Mount {
	mounts := []Mount{}
	for _, line := range strings.Split(string(data), "\n") {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
		fields := strings.Fields(line)
		for i, f := range fields {
			if f == "-" && i > 4 && i+2 < len(fields) {
				m := Mount{Point: unescapeMount(fields[4]), FSType: fields[i+1], Source: unescapeMount(fields[i+2]),
					Root: unescapeMount(fields[3])}
				if i+3 < len(fields) {
					m.Super = fields[i+3]
				}
				mounts = append(mounts, m)
				break
			}
		}
	}
	return mounts
}

// unescapeMount undoes the mount table's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

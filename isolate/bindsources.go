package isolate

// Bind sources. Each host path a run binds is opened with the caller's
// rights (O_PATH, no symlink followed anywhere in it), checked through
// that descriptor (what the caller may read, and write for a read-write
// bind; no kernel interface such as procfs or sysfs, whatever the path
// looks like), and copied as a detached mount (open_tree) that init moves
// into the box: nothing is looked up by its path again, so no swap of a
// directory for a symlink between the check and the mount can redirect
// it.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/rootfs"
)

// bindSource is one bind's source, opened: its detached copy, for init.
// Without root the supervisor may not copy a mount (open_tree needs
// CAP_SYS_ADMIN in the host's mount namespace): after the same checks,
// init binds the path itself, in the user's own namespaces, where a swap
// of the path could give the user nothing the user does not have.
type bindSource struct {
	tree   *os.File
	dir    bool
	initFD int    // init's descriptor of tree
	path   string // without root: the checked path, bound by init
}

// openBinds opens the run's bind sources (see bindSource), one per
// spec.Binds entry: nil for a file system mount and for an optional
// source that does not exist.
func (s *supervisor) openBinds() error {
	if len(s.spec.Binds) == 0 {
		return nil
	}
	devDev, err := hostDevDevice()
	if err != nil {
		return err
	}
	var mounts []hostMount // read once, for the first recursive bind
	s.binds = make([]*bindSource, len(s.spec.Binds))
	return withFSThread(func(t *fsThread) error {
		for i, b := range s.spec.Binds {
			if b.FS != "" {
				continue
			}
			src, err := openBindSource(t, s.caller(), b, devDev, &mounts, s.host.rootless != nil)
			if err != nil {
				return fmt.Errorf("bind %s: %w", b.Host, err)
			}
			s.binds[i] = src
		}
		return nil
	})
}

func (s *supervisor) closeBinds() {
	closeBindSources(s.binds)
	s.binds = nil
}

// closeBindSources lets go of the detached copies of bind sources.
func closeBindSources(binds []*bindSource) {
	for _, b := range binds {
		if b != nil && b.tree != nil {
			b.tree.Close()
		}
	}
}

// hostDevDevice is the device of the host's /dev when that is a devtmpfs
// (which says tmpfs to fstatfs), else 0: every mount of devtmpfs shares
// its one superblock.
func hostDevDevice() (uint64, error) {
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

// openBindSource opens b.Host as caller, checks it, and copies it as a
// detached mount (as this thread's own credentials: the supervisor's).
// An optional source that does not exist is nil.
func openBindSource(t *fsThread, caller Cred, b rootfs.Bind, devDev uint64, mounts *[]hostMount, byPath bool) (*bindSource, error) {
	if _, ok := fdName(b.Host); ok {
		return nil, errors.New("names a descriptor; a bind takes a file or directory")
	}
	if err := t.become(caller); err != nil {
		return nil, err
	}
	fd, err := openNoLinks(caller, b.Host, unix.O_PATH, 0)
	if errors.Is(err, unix.ENOENT) && b.Optional {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
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
	if err := t.become(t.orig); err != nil {
		return nil, err
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if isDir && !b.NoRec {
		if err := noKernelMountBelow(fd, mounts); err != nil {
			return nil, err
		}
	}
	if byPath {
		path, err := filepath.Abs(b.Host)
		if err != nil {
			return nil, err
		}
		return &bindSource{dir: isDir, path: path}, nil
	}
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	if !b.NoRec {
		flags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(fd, "", flags)
	if err != nil {
		return nil, fmt.Errorf("copy the mount: %w", err)
	}
	// The copy of a shared mount would share its peer group: a mount
	// under it in the box would then appear on the host.
	attr := &unix.MountAttr{Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(tree)
		return nil, fmt.Errorf("make the copy private: %w", err)
	}
	return &bindSource{tree: os.NewFile(uintptr(tree), "bind:"+b.Host), dir: isDir}, nil
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

// hostMount is a line of this process's mountinfo: where, what, and
// its source.
type hostMount struct{ point, fsType, source string }

// noKernelMountBelow refuses a directory (fd) below which a kernel
// interface is mounted: a recursive bind would bring that mount along
// (--bind /:/host gets the host's /proc, /sys and /dev). mounts is this
// process's mount table, read on first use.
func noKernelMountBelow(fd int, mounts *[]hostMount) error {
	dir, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return err
	}
	if *mounts == nil {
		if *mounts, err = readMounts(); err != nil {
			return err
		}
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for _, m := range *mounts {
		if kernelFSTypes[m.fsType] && strings.HasPrefix(m.point, prefix) {
			return fmt.Errorf("holds the host's %s mount at %s, a kernel interface never bound into a box (bind what the box needs, or a non-recursive bind)", m.fsType, m.point)
		}
	}
	return nil
}

// readMounts reads this process's mount table, in its order (a mount
// after one on the same point is on top of it).
func readMounts() ([]hostMount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	mounts := []hostMount{}
	for _, line := range strings.Split(string(data), "\n") {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
		fields := strings.Fields(line)
		for i, f := range fields {
			if f == "-" && i > 4 && i+2 < len(fields) {
				mounts = append(mounts, hostMount{point: unescapeMount(fields[4]), fsType: fields[i+1], source: unescapeMount(fields[i+2])})
				break
			}
		}
	}
	return mounts, nil
}

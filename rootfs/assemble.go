package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// StagingDir is where the box's new root is mounted before pivot_root. It
// exists on the host (empty); each box mounts its own tmpfs over it inside
// its own mount namespace, so boxes never see each other's.
const StagingDir = "/run/isolate/root"

// Bind is a host path bound into the box.
type Bind struct {
	Host     string `json:"host"`
	Box      string `json:"box"`
	Writable bool   `json:"rw,omitempty"`
	// Optional binds are skipped when the host path does not exist.
	Optional bool `json:"optional,omitempty"`
}

// Layout says what to build.
type Layout struct {
	// Image is the directory whose /usr, /bin, /lib* the box gets ("/" for
	// the host).
	Image string `json:"image"`
	// TmpSize is the size of /box and of /tmp, in bytes (0: no limit
	// beyond the memory cgroup).
	TmpSize int64 `json:"tmp_size"`
	// UID and GID own /box (inside the box's user namespace).
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Binds are extra binds, applied last, in order.
	Binds []Bind `json:"binds,omitempty"`
	// BoxDir, when set, is a host directory bound as /box instead of a
	// fresh tmpfs (persistent boxes).
	BoxDir string `json:"box_dir,omitempty"`
	// HostNet adds the host's resolv.conf, which only makes sense when
	// the box shares the host's network.
	HostNet bool `json:"host_net,omitempty"`
}

// StepError names the step of the assembly that failed.
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

func step(name string, err error) error {
	if err == nil {
		return nil
	}
	return &StepError{Step: name, Err: err}
}

// systemDirs are the image directories bound read-only into every box.
var systemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// hostEtc are host /etc entries that toolchains of the host image need
// (alternatives symlinks, the JVM's configuration). They hold no secrets.
var hostEtc = []string{"alternatives", "java-17-openjdk", "java-21-openjdk", "ld.so.conf", "ld.so.conf.d"}

const (
	roFlags  = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	tmpFlags = unix.MS_NOSUID | unix.MS_NODEV
)

// Assemble builds the box's root file system in the current (new, private)
// mount namespace and pivots into it. It must run as root of the box's user
// namespace, before anything of the program runs.
func Assemble(l *Layout) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return step("make mounts private", err)
	}
	root := StagingDir
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16m"); err != nil {
		return step("mount root tmpfs on "+root, err)
	}
	if err := systemTree(root, l.Image); err != nil {
		return err
	}
	if err := etc(root, l); err != nil {
		return err
	}
	if err := mkdirMount(root, "proc", "proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible"); err != nil {
		return err
	}
	if err := dev(root); err != nil {
		return err
	}
	size := ""
	if l.TmpSize > 0 {
		size = ",size=" + strconv.FormatInt(l.TmpSize, 10)
	}
	owner := fmt.Sprintf(",uid=%d,gid=%d", l.UID, l.GID)
	if l.BoxDir != "" {
		if err := bind(l.BoxDir, filepath.Join(root, "box"), true, false); err != nil {
			return err
		}
	} else if err := mkdirMount(root, "box", "tmpfs", "tmpfs", tmpFlags, "mode=0755"+size+owner); err != nil {
		return err
	}
	if err := mkdirMount(root, "tmp", "tmpfs", "tmpfs", tmpFlags, "mode=1777"+size); err != nil {
		return err
	}
	for _, b := range l.Binds {
		if err := userBind(root, b); err != nil {
			return err
		}
	}
	if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return step("make the root read-only", err)
	}
	return pivot(root)
}

// systemTree binds the image's system directories, or recreates its
// symlinks (merged /usr).
func systemTree(root, image string) error {
	for _, d := range systemDirs {
		src := filepath.Join(image, d)
		fi, err := os.Lstat(src)
		if err != nil {
			continue
		}
		dst := filepath.Join(root, d)
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				return step("read link "+src, err)
			}
			if err := os.Symlink(target, dst); err != nil {
				return step("link /"+d, err)
			}
			continue
		}
		if err := bind(src, dst, false, true); err != nil {
			return err
		}
	}
	return nil
}

// etc writes a minimal /etc: the box user, loopback names, the dynamic
// linker's cache.
func etc(root string, l *Layout) error {
	dir := filepath.Join(root, "etc")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return step("create /etc", err)
	}
	files := map[string]string{
		"passwd":        fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nbox:x:%d:%d:box:/box:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", l.UID, l.GID),
		"group":         fmt.Sprintf("root:x:0:\nbox:x:%d:\nnogroup:x:65534:\n", l.GID),
		"hosts":         "127.0.0.1\tlocalhost isolate\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"hostname":      "isolate\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return step("write /etc/"+name, err)
		}
	}
	copies := []string{"ld.so.cache"}
	if l.HostNet {
		copies = append(copies, "resolv.conf")
	}
	for _, name := range copies {
		data, err := os.ReadFile(filepath.Join(l.Image, "etc", name))
		if err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return step("write /etc/"+name, err)
		}
	}
	for _, name := range hostEtc {
		src := filepath.Join(l.Image, "etc", name)
		if _, err := os.Lstat(src); err != nil {
			continue
		}
		if err := bind(src, filepath.Join(dir, name), false, true); err != nil {
			return err
		}
	}
	return nil
}

// devNodes are the host device nodes bound into the box's /dev.
var devNodes = []string{"null", "zero", "full", "random", "urandom"}

func dev(root string) error {
	d := filepath.Join(root, "dev")
	if err := mkdirMount(root, "dev", "tmpfs", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, n := range devNodes {
		if err := bind("/dev/"+n, filepath.Join(d, n), true, false); err != nil {
			return err
		}
	}
	links := map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(d, name)); err != nil {
			return step("link /dev/"+name, err)
		}
	}
	if err := mkdirMount(d, "shm", "tmpfs", "tmpfs", tmpFlags, "mode=1777,size=64m"); err != nil {
		return err
	}
	return nil
}

// userBind applies one --bind. The host path was checked by the caller;
// the box path must stay inside the box root.
func userBind(root string, b Bind) error {
	if _, err := os.Stat(b.Host); err != nil {
		if b.Optional {
			return nil
		}
		return step("bind "+b.Host, err)
	}
	dst, err := inside(root, b.Box)
	if err != nil {
		return step("bind "+b.Host, err)
	}
	return bind(b.Host, dst, b.Writable, true)
}

// inside joins a box path onto the root and refuses anything that climbs
// out of it.
func inside(root, boxPath string) (string, error) {
	clean := filepath.Clean("/" + boxPath)
	if clean == "/" {
		return "", errors.New("cannot bind over the box root")
	}
	return filepath.Join(root, clean), nil
}

// bind mounts src on dst (created to match src's type), read-only unless
// writable, recursively when rec.
func bind(src, dst string, writable, rec bool) error {
	fi, err := os.Stat(src)
	if err != nil {
		return step("bind "+src, err)
	}
	if err := makeTarget(dst, fi.IsDir()); err != nil {
		return step("create mount point "+dst, err)
	}
	flags := uintptr(unix.MS_BIND)
	if rec {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(src, dst, "", flags, ""); err != nil {
		return step("bind "+src+" on "+dst, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}
	if !writable {
		attr.Attr_set = roFlags
	}
	at := 0
	if rec {
		at = unix.AT_RECURSIVE
	}
	if err := unix.MountSetattr(-1, dst, uint(at), attr); err != nil {
		return step("set attributes of "+dst, err)
	}
	return nil
}

// makeTarget creates a directory or an empty file to mount on, with its
// parents.
func makeTarget(path string, dir bool) error {
	if dir {
		return os.MkdirAll(path, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func mkdirMount(parent, name, source, fstype string, flags uintptr, data string) error {
	dst := filepath.Join(parent, name)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return step("create /"+name, err)
	}
	if err := unix.Mount(source, dst, fstype, flags, data); err != nil {
		return step("mount "+fstype+" on /"+strings.TrimPrefix(dst, StagingDir+"/"), err)
	}
	return nil
}

// pivot makes root the root of the mount namespace and drops the old one.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return step("enter new root", err)
	}
	// pivot_root(".", ".") stacks the old root under the new one; detaching
	// "." afterwards removes it without a put_old directory.
	if err := unix.PivotRoot(".", "."); err != nil {
		return step("pivot_root", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return step("detach old root", err)
	}
	return step("chdir /", unix.Chdir("/"))
}

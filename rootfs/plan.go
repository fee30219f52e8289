package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Op is one step of building a box's file system, executed by the box's
// init (a small C program, see isolate/init.c) in the box's new mount
// namespace. Step names it in error messages.
type Op struct {
	Step string
	Name string // private, mount, setattr, mkdir, touch, symlink, write, remount-ro, pivot
	Args []string
}

// The attributes of read-only binds: nothing on them can gain privileges
// or reach devices.
const roAttrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV

// systemDirs are the image directories bound read-only into every box.
var systemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// imageEtc are /etc entries of the image that programs and toolchains need
// (the dynamic linker's cache, the alternatives symlinks, the JVM's
// configuration), bound read-only. They hold no secrets. The cache is
// bound rather than copied: tens of kilobytes, on every run otherwise.
var imageEtc = []string{"ld.so.cache", "alternatives", "java-17-openjdk", "java-21-openjdk"}

// devNodes are the host device nodes bound into the box's /dev.
var devNodes = []string{"null", "zero", "full", "random", "urandom"}

// planner accumulates the ops of one box.
type planner struct {
	root string
	ops  []Op
}

func (p *planner) add(step, name string, args ...string) {
	p.ops = append(p.ops, Op{Step: step, Name: name, Args: args})
}

// in is the staging path of a path inside the box.
func (p *planner) in(boxPath string) string { return filepath.Join(p.root, boxPath) }

func (p *planner) mount(step, src, dst, fstype string, flags uintptr, data string) {
	p.add(step, "mount", src, dst, fstype, strconv.FormatUint(uint64(flags), 10), data)
}

// bind binds host path src on box path dst, read-only unless writable.
func (p *planner) bind(src, dst string, dir, writable, rec bool) {
	target := p.in(dst)
	if dir {
		p.add("create "+dst, "mkdir", target)
	} else {
		p.add("create "+dst, "touch", target)
	}
	flags := uintptr(unix.MS_BIND)
	if rec {
		flags |= unix.MS_REC
	}
	p.mount("bind "+src+" on "+dst, src, target, "", flags, "")
	set := uint64(unix.MOUNT_ATTR_NOSUID)
	if !writable {
		set = roAttrs
	}
	recursive := "0"
	if rec {
		recursive = "1"
	}
	p.add("set attributes of "+dst, "setattr", target, strconv.FormatUint(set, 10), recursive)
}

// Plan turns a layout into the ops that build it. It runs on the host
// (the supervisor), where it checks the host paths it binds; the ops then
// run in the box's mount namespace, which starts as a copy of the host's.
func Plan(l *Layout) ([]Op, error) {
	p := &planner{root: StagingDir}
	p.add("make mounts private", "private")
	p.mount("mount the root tmpfs", "tmpfs", p.root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16m")
	for _, d := range systemDirs {
		src := filepath.Join(l.Image, d)
		fi, err := os.Lstat(src)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				return nil, fmt.Errorf("read link %s: %w", src, err)
			}
			p.add("link /"+d, "symlink", target, p.in(d))
			continue
		}
		p.bind(filepath.Join(l.source(), d), "/"+d, true, false, true)
	}
	if err := p.etc(l); err != nil {
		return nil, err
	}
	p.add("create /proc", "mkdir", p.in("proc"))
	// hidepid: the program sees its own processes, not init.
	p.mount("mount /proc", "proc", p.in("proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible")
	p.dev()
	size := ""
	if l.TmpSize > 0 {
		size = ",size=" + strconv.FormatInt(l.TmpSize, 10)
	}
	if l.BoxDir != "" {
		p.bind(l.BoxDir, "/box", true, true, false)
	} else {
		p.add("create /box", "mkdir", p.in("box"))
		p.mount("mount /box", "tmpfs", p.in("box"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
			fmt.Sprintf("mode=0755,uid=%d,gid=%d%s", l.UID, l.GID, size))
	}
	p.add("create /tmp", "mkdir", p.in("tmp"))
	p.mount("mount /tmp", "tmpfs", p.in("tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"+size)
	for _, b := range l.Binds {
		if err := p.userBind(b); err != nil {
			return nil, err
		}
	}
	p.add("make the root read-only", "remount-ro", p.root)
	p.add("pivot_root", "pivot", p.root)
	return p.ops, nil
}

// userBind binds a host path (or mounts a file system) where the caller
// asked: nosuid always, read-only unless Writable, nodev unless Dev,
// noexec with NoExec, recursive unless NoRec (ioi/isolate's directory
// rules).
func (p *planner) userBind(b Bind) error {
	dst := filepath.Clean("/" + b.Box)
	if dst == "/" {
		return errors.New("bind " + b.Host + ": cannot bind over the box root")
	}
	flags := uintptr(unix.MS_NOSUID)
	attrs := uint64(unix.MOUNT_ATTR_NOSUID)
	if !b.Writable {
		flags |= unix.MS_RDONLY
		attrs |= unix.MOUNT_ATTR_RDONLY
	}
	if !b.Dev {
		flags |= unix.MS_NODEV
		attrs |= unix.MOUNT_ATTR_NODEV
	}
	if b.NoExec {
		flags |= unix.MS_NOEXEC
		attrs |= unix.MOUNT_ATTR_NOEXEC
	}
	if b.FS != "" {
		p.add("create "+dst, "mkdir", p.in(dst))
		p.mount("mount "+b.FS+" on "+dst, b.FS, p.in(dst), b.FS, flags, "")
		return nil
	}
	fi, err := os.Stat(b.Host)
	if err != nil {
		if b.Optional {
			return nil
		}
		return fmt.Errorf("bind %s: %w", b.Host, err)
	}
	target := p.in(dst)
	if fi.IsDir() {
		p.add("create "+dst, "mkdir", target)
	} else {
		p.add("create "+dst, "touch", target)
	}
	bindFlags := uintptr(unix.MS_BIND)
	recursive := "0"
	if !b.NoRec {
		bindFlags |= unix.MS_REC
		recursive = "1"
	}
	p.mount("bind "+b.Host+" on "+dst, b.Host, target, "", bindFlags, "")
	p.add("set attributes of "+dst, "setattr", target, strconv.FormatUint(attrs, 10), recursive)
	return nil
}

// etc writes a minimal /etc (the box user, loopback names) and binds the
// image's entries the box needs (imageEtc).
func (p *planner) etc(l *Layout) error {
	p.add("create /etc", "mkdir", p.in("etc"))
	files := []struct{ name, content string }{
		{"passwd", fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nbox:x:%d:%d:box:/box:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", l.UID, l.GID)},
		{"group", fmt.Sprintf("root:x:0:\nbox:x:%d:\nnogroup:x:65534:\n", l.GID)},
		{"hosts", "127.0.0.1\tlocalhost isolate\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{"hostname", "isolate\n"},
		{"nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"},
	}
	if l.HostNet {
		if data, err := os.ReadFile(filepath.Join(l.Image, "etc", "resolv.conf")); err == nil {
			files = append(files, struct{ name, content string }{"resolv.conf", string(data)})
		}
	}
	for _, f := range files {
		p.add("write /etc/"+f.name, "write", p.in("etc/"+f.name), "420", f.content)
	}
	for _, name := range imageEtc {
		src := filepath.Join(l.Image, "etc", name)
		if fi, err := os.Stat(src); err == nil {
			p.bind(filepath.Join(l.source(), "etc", name), "/etc/"+name, fi.IsDir(), false, true)
		}
	}
	return nil
}

// dev builds a minimal /dev: a few host device nodes bound in, the usual
// symlinks, a tmpfs /dev/shm.
func (p *planner) dev() {
	// A directory of the root tmpfs, read-only like it once the box is
	// built: the nodes are bind mounts, which keep their own flags.
	p.add("create /dev", "mkdir", p.in("dev"))
	for _, n := range devNodes {
		p.add("create /dev/"+n, "touch", p.in("dev/"+n))
		p.mount("bind /dev/"+n, "/dev/"+n, p.in("dev/"+n), "", unix.MS_BIND, "")
	}
	for _, l := range [][2]string{{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}} {
		p.add("link /dev/"+l[1], "symlink", l[0], p.in("dev/"+l[1]))
	}
	p.add("create /dev/shm", "mkdir", p.in("dev/shm"))
	p.mount("mount /dev/shm", "tmpfs", p.in("dev/shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m")
}

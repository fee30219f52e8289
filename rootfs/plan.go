package rootfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Op is one step of building a box's file system, executed by the box's
// init (a small C program, see isolate/boxinit/init_fs.c) in the box's new mount
// namespace: one of the types below. Each has a Step, which names it in
// error messages; paths are the staging paths init works on.
type Op interface{ step() string }

type (
	// MakePrivate makes every mount private: nothing of the box
	// propagates back to the host.
	MakePrivate struct{ Step string }
	// MoveMount moves the detached mount Tree (init's descriptor) to
	// Target (move_mount(2)).
	MoveMount struct {
		Step   string
		Tree   int
		Target string
	}
	// Mount is mount(2); empty FSType and Data are none.
	Mount struct {
		Step, Source, Target, FSType string
		Flags                        uint64 // MS_*
		Data                         string
	}
	// SetAttr sets mount attributes (MOUNT_ATTR_*) with mount_setattr(2).
	SetAttr struct {
		Step, Path string
		Attrs      uint64
		Recursive  bool
	}
	// Mkdir creates a directory and any missing parents (0755).
	Mkdir struct {
		Step, Path string
		Mode       uint32
	}
	// Touch creates an empty file (a bind mount's target) and any missing
	// parents.
	Touch struct {
		Step, Path string
		Mode       uint32
	}
	// Symlink creates Path, a symbolic link to Target.
	Symlink struct{ Step, Target, Path string }
	// WriteFile creates Path with Content.
	WriteFile struct {
		Step, Path string
		Mode       uint32
		Content    string
	}
	// RemountRO makes the mount at Path read-only (and nosuid, nodev).
	RemountRO struct{ Step, Path string }
	// Pivot makes Root the box's root (pivot_root) and drops the old one.
	Pivot struct{ Step, Root string }
)

func (o MakePrivate) step() string { return o.Step }
func (o Mount) step() string       { return o.Step }
func (o MoveMount) step() string   { return o.Step }
func (o SetAttr) step() string     { return o.Step }
func (o Mkdir) step() string       { return o.Step }
func (o Touch) step() string       { return o.Step }
func (o Symlink) step() string     { return o.Step }
func (o WriteFile) step() string   { return o.Step }
func (o RemountRO) step() string   { return o.Step }
func (o Pivot) step() string       { return o.Step }

// Modes of what the plan creates: readable by the box user.
const (
	dirMode  = 0o755
	fileMode = 0o644
)

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

func (p *planner) add(op Op) { p.ops = append(p.ops, op) }

// in is the staging path of a path inside the box.
func (p *planner) in(boxPath string) string { return filepath.Join(p.root, boxPath) }

func (p *planner) mount(step, src, dst, fstype string, flags uint64, data string) {
	p.add(Mount{Step: step, Source: src, Target: dst, FSType: fstype, Flags: flags, Data: data})
}

func (p *planner) mkdir(step, path string) { p.add(Mkdir{Step: step, Path: path, Mode: dirMode}) }

func (p *planner) touch(step, path string) { p.add(Touch{Step: step, Path: path, Mode: fileMode}) }

// bind binds host path src on box path dst, read-only unless writable.
func (p *planner) bind(src, dst string, dir, writable, rec bool) {
	target := p.in(dst)
	if dir {
		p.mkdir("create "+dst, target)
	} else {
		p.touch("create "+dst, target)
	}
	flags := uint64(unix.MS_BIND)
	if rec {
		flags |= unix.MS_REC
	}
	p.mount("bind "+src+" on "+dst, src, target, "", flags, "")
	set := uint64(unix.MOUNT_ATTR_NOSUID)
	if !writable {
		set = roAttrs
	}
	p.add(SetAttr{Step: "set attributes of " + dst, Path: target, Attrs: set, Recursive: rec})
}

// Plan turns a layout into the ops that build it. It runs on the host
// (the supervisor), where it checks the host paths it binds; the ops then
// run in the box's mount namespace, which starts as a copy of the host's.
func Plan(l *Layout) ([]Op, error) {
	p := &planner{root: StagingDir}
	if l.Staging != "" {
		p.root = l.Staging
	}
	p.add(MakePrivate{Step: "make mounts private"})
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
			p.add(Symlink{Step: "link /" + d, Target: target, Path: p.in(d)})
			continue
		}
		p.bind(filepath.Join(l.source(), d), "/"+d, true, false, true)
	}
	if err := p.etc(l); err != nil {
		return nil, err
	}
	p.mkdir("create /proc", p.in("proc"))
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
		uid, gid := l.UID, l.GID
		if l.HandOver {
			uid, gid = 0, 0
		}
		p.mkdir("create /box", p.in("box"))
		p.mount("mount /box", "tmpfs", p.in("box"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
			fmt.Sprintf("mode=0755,uid=%d,gid=%d%s", uid, gid, size))
	}
	p.mkdir("create /tmp", p.in("tmp"))
	p.mount("mount /tmp", "tmpfs", p.in("tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"+size)
	for _, b := range l.Binds {
		if err := p.userBind(b); err != nil {
			return nil, err
		}
	}
	p.add(RemountRO{Step: "make the root read-only", Path: p.root})
	p.add(Pivot{Step: "pivot_root", Root: p.root})
	return p.ops, nil
}

// userBind binds a host path the supervisor opened (or mounts a file
// system) where the caller asked: nosuid always, read-only unless
// Writable, nodev unless Dev, noexec with NoExec, recursive unless NoRec
// (ioi/isolate's directory rules).
func (p *planner) userBind(b Bind) error {
	dst := filepath.Clean("/" + b.Box)
	if dst == "/" {
		return errors.New("bind " + b.Host + ": cannot bind over the box root")
	}
	flags := uint64(unix.MS_NOSUID)
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
		p.mkdir("create "+dst, p.in(dst))
		p.mount("mount "+b.FS+" on "+dst, b.FS, p.in(dst), b.FS, flags, "")
		return nil
	}
	// Never bound by its path, which could lead elsewhere by the time
	// init binds it: the supervisor opened it (or found an optional one
	// missing).
	o := b.Opened
	if o == nil {
		if b.Optional {
			return nil
		}
		return fmt.Errorf("bind %s: the source was not opened", b.Host)
	}
	target := p.in(dst)
	if o.Dir {
		p.mkdir("create "+dst, target)
	} else {
		p.touch("create "+dst, target)
	}
	if o.Path != "" {
		flags := uint64(unix.MS_BIND)
		if !b.NoRec {
			flags |= unix.MS_REC
		}
		p.mount("bind "+b.Host+" on "+dst, o.Path, target, "", flags, "")
	} else {
		p.add(MoveMount{Step: "bind " + b.Host + " on " + dst, Tree: o.Tree, Target: target})
	}
	p.add(SetAttr{Step: "set attributes of " + dst, Path: target, Attrs: attrs, Recursive: !b.NoRec})
	return nil
}

// etc writes a minimal /etc (the box user, loopback names) and binds the
// image's entries the box needs (imageEtc).
func (p *planner) etc(l *Layout) error {
	p.mkdir("create /etc", p.in("etc"))
	files := []struct{ name, content string }{
		{"passwd", fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nbox:x:%d:%d:box:/box:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", l.UID, l.GID)},
		{"group", fmt.Sprintf("root:x:0:\nbox:x:%d:\nnogroup:x:65534:\n", l.GID)},
		{"hosts", "127.0.0.1\tlocalhost isolate\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{"hostname", "isolate\n"},
		{"nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"},
	}
	if l.HostNet {
		if data, err := readInImage(l.Image, "etc/resolv.conf"); err == nil {
			files = append(files, struct{ name, content string }{"resolv.conf", string(data)})
		}
	}
	for _, f := range files {
		p.add(WriteFile{Step: "write /etc/" + f.name, Path: p.in("etc/" + f.name), Mode: fileMode, Content: f.content})
	}
	// Bound by path: only an entry reached without a symlink (the image's
	// etc/ opened without one, the entry itself not one), so that no link
	// in the image names a file of the host.
	etc, err := openInImage(l.Image, "etc", unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_BENEATH)
	if err != nil {
		return nil
	}
	defer unix.Close(etc)
	for _, name := range imageEtc {
		var st unix.Stat_t
		if unix.Fstatat(etc, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT != unix.S_IFLNK {
			p.bind(filepath.Join(l.source(), "etc", name), "/etc/"+name, st.Mode&unix.S_IFMT == unix.S_IFDIR, false, true)
		}
	}
	return nil
}

// maxImageFile bounds what is read of an image's own file (resolv.conf).
const maxImageFile = 64 << 10

// readInImage reads the regular file rel of the image directory image,
// its symlinks resolved inside the image (RESOLVE_IN_ROOT: a link to
// /etc/shadow names the image's, never the host's), at most
// maxImageFile bytes.
func readInImage(image, rel string) ([]byte, error) {
	fd, err := openInImage(image, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), filepath.Join(image, rel))
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", f.Name())
	}
	return io.ReadAll(io.LimitReader(f, maxImageFile))
}

// openInImage opens rel below the image directory with openat2's resolve
// flags.
func openInImage(image, rel string, flags int, resolve uint64) (int, error) {
	root, err := unix.Open(image, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	return unix.Openat2(root, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolve})
}

// dev builds a minimal /dev: a few host device nodes bound in, the usual
// symlinks, a tmpfs /dev/shm.
func (p *planner) dev() {
	// A directory of the root tmpfs, read-only like it once the box is
	// built: the nodes are bind mounts, which keep their own flags.
	p.mkdir("create /dev", p.in("dev"))
	for _, n := range devNodes {
		p.touch("create /dev/"+n, p.in("dev/"+n))
		p.mount("bind /dev/"+n, "/dev/"+n, p.in("dev/"+n), "", unix.MS_BIND, "")
	}
	for _, l := range [][2]string{{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}} {
		p.add(Symlink{Step: "link /dev/" + l[1], Target: l[0], Path: p.in("dev/" + l[1])})
	}
	p.mkdir("create /dev/shm", p.in("dev/shm"))
	p.mount("mount /dev/shm", "tmpfs", p.in("dev/shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m")
}

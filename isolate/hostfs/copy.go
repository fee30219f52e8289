package hostfs

// --copy-in and --copy-out. The box side is read or written with the box
// user's rights, resolved inside the box (RESOLVE_IN_ROOT), the host side
// with the caller's; directories are walked iteratively, relative to
// directory descriptors, never through a symlink, and a copy-out is
// bounded in bytes, files, depth and time.

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// copyMaxFiles bounds the files and directories of one run's copy-out.
	copyMaxFiles = 10000
	// CopyMaxDepth bounds how deep a copied directory goes; each level
	// holds two descriptors while it is copied.
	CopyMaxDepth = 100
	// CopyTimeout bounds one run's copy-out.
	CopyTimeout = 20 * time.Second
	// defaultCopyBytes bounds a copy-out when neither its limit nor the
	// box's tmp size is set.
	defaultCopyBytes = 64 << 20
)

// BoxPath makes a path given by the user absolute inside the box: relative
// paths are relative to /box.
func BoxPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/box/" + p
	}
	return filepath.Clean(p)
}

// OpenInBox opens path inside the box whose root directory is rootFD,
// resolving every symlink as the box sees it: nothing can lead out of the
// box (RESOLVE_IN_ROOT), and no /proc magic link is followed.
func OpenInBox(rootFD int, path string, flags int, mode uint32) (int, error) {
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	return unix.Openat2(rootFD, strings.TrimPrefix(path, "/"), how)
}

// mkdirInBox opens directory dir of the box (O_PATH), making what is
// missing of it as the calling thread's user (the box's), as `mkdir -p`
// does: a copy-in may name a file in a directory that does not exist yet.
// Each step resolves inside the box's root.
func mkdirInBox(rootFD int, dir string) (int, error) {
	fd, err := OpenInBox(rootFD, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != unix.ENOENT {
		return fd, err
	}
	parent, name := filepath.Dir(dir), filepath.Base(dir)
	if parent == dir {
		return -1, err
	}
	pfd, err := mkdirInBox(rootFD, parent)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, name, 0o755); err != nil && err != unix.EEXIST {
		return -1, err
	}
	return OpenInBox(rootFD, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
}

// Budget is what the copies of one run may still write.
type Budget struct {
	bytes    int64 // data bytes (holes cost nothing)
	files    int   // files and directories
	deadline time.Time
}

// CopyOutBudget is the bound of one run's copy-out: limit bytes, else
// tmpSize (what the box's /box could hold).
func CopyOutBudget(limit, tmpSize int64) *Budget {
	b := &Budget{bytes: limit, files: copyMaxFiles, deadline: time.Now().Add(CopyTimeout)}
	if b.bytes <= 0 {
		b.bytes = tmpSize
	}
	if b.bytes <= 0 {
		b.bytes = defaultCopyBytes
	}
	return b
}

// unbounded is the budget of a copy-in: the caller's own files, bounded by
// the box's file system.
func unbounded() *Budget { return &Budget{bytes: math.MaxInt64, files: math.MaxInt} }

func (b *Budget) take(n int64) error {
	if !b.deadline.IsZero() && time.Now().After(b.deadline) {
		return fmt.Errorf("copying took more than %v", CopyTimeout)
	}
	if n > b.bytes {
		return fmt.Errorf("more data than the copy-out limit allows (%d bytes left)", b.bytes)
	}
	b.bytes -= n
	return nil
}

func (b *Budget) file() error {
	if b.files <= 0 {
		return errors.New("more files than a copy allows")
	}
	b.files--
	return b.take(0)
}

// fileID is an inode, copied once however many links it has.
type fileID struct{ dev, ino uint64 }

// treeCopy is one copy: whose rights read the source and write the
// destination, and what it may write.
type treeCopy struct {
	t        *FSThread
	from, to Cred
	// srcResolve are more RESOLVE_ flags for the source's entries: a
	// copy-out stays on the box's own file system of the directory.
	srcResolve uint64
	// dstInBox: the destination is the box, where a bound host file is
	// never written.
	dstInBox bool
	budget   *Budget
	dstRoot  int               // the destination directory of a tree copy
	links    map[fileID]string // inode -> its copy's path below dstRoot
	buf      []byte
	// noSendfile: the kernel cannot copy between these files itself.
	noSendfile bool
}

// CopyIn copies the caller's file or directory from (opened with no
// symlink followed in its path: see openSource) into the box whose root
// is rootFD, created with the box user's rights (owned by it, no
// chown needed): nothing is written through a symlink, onto a device or
// onto a file bound from the host.
func CopyIn(t *FSThread, rootFD int, from, to string, caller, box Cred) error {
	tc := &treeCopy{t: t, from: caller, to: box, dstInBox: true, budget: unbounded()}
	if err := t.Become(caller); err != nil {
		return err
	}
	src, err := openSource(caller, from, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return err
	}
	st, err := checkFile(src, true)
	if err != nil {
		unix.Close(src)
		return err
	}
	dst := BoxPath(to)
	if err := t.Become(box); err != nil {
		unix.Close(src)
		return err
	}
	parent, err := mkdirInBox(rootFD, filepath.Dir(dst))
	if err != nil {
		unix.Close(src)
		return fmt.Errorf("open %s in the box: %w", filepath.Dir(dst), openErr(err))
	}
	defer unix.Close(parent)
	if err := tc.copyTop(src, &st, parent, filepath.Base(dst)); err != nil {
		return fmt.Errorf("%s in the box: %w", dst, err)
	}
	return nil
}

// ContentIn writes content into the box's file to (made with its
// missing directories), as the box user, as CopyIn writes a file.
func ContentIn(t *FSThread, rootFD int, to string, content io.Reader, fileMode os.FileMode, box Cred) error {
	dst := BoxPath(to)
	if err := t.Become(box); err != nil {
		return err
	}
	parent, err := mkdirInBox(rootFD, filepath.Dir(dst))
	if err != nil {
		return fmt.Errorf("open %s in the box: %w", filepath.Dir(dst), openErr(err))
	}
	defer unix.Close(parent)
	mode := fileMode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	fd, err := (&treeCopy{}).createInBox(parent, filepath.Base(dst), uint32(mode))
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), dst)
	defer f.Close()
	// (A plain Writer: io.Copy on the file could hand the copy to
	// another thread, without the box user's rights.)
	if _, err := io.Copy(struct{ io.Writer }{f}, content); err != nil {
		return err
	}
	// The mode as asked, whatever the umask took from it.
	return f.Chmod(mode)
}

// openBoxSource opens the box's file src for reading with the box user's
// rights: a regular file, or with dirOK a directory (nothing else: a
// FIFO, socket, device or kernel interface is an error).
func openBoxSource(t *FSThread, rootFD int, src string, box Cred, dirOK bool) (int, unix.Stat_t, error) {
	if err := t.Become(box); err != nil {
		return -1, unix.Stat_t{}, err
	}
	fd, err := OpenInBox(rootFD, src, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return -1, unix.Stat_t{}, fmt.Errorf("open %s in the box: %w", src, openErr(err))
	}
	st, err := checkFile(fd, dirOK)
	if err != nil {
		unix.Close(fd)
		return -1, st, fmt.Errorf("%s in the box %w", src, err)
	}
	return fd, st, nil
}

// SinkOut gives sink the box's regular file from, opened with the
// box user's rights; the sink runs with the thread's own.
func SinkOut(t *FSThread, rootFD int, from string, sink func(f *os.File, size int64) error, box Cred) error {
	src := BoxPath(from)
	fd, st, err := openBoxSource(t, rootFD, src, box, false)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), src)
	defer f.Close()
	if err := t.Become(t.orig); err != nil {
		return err
	}
	return sink(f, st.Size)
}

// CopyOut copies the box's file or directory from to the host
// destination dst (opened with the caller's rights before the run). The
// path is resolved inside the box with the box user's rights; inside a
// copied directory symlinks and mounts are skipped. Only regular files
// and directories are copied: a FIFO, socket, device or a file of procfs
// or sysfs is an error.
func CopyOut(t *FSThread, rootFD int, from string, dst *HostPath, box, caller Cred, budget *Budget) error {
	tc := &treeCopy{t: t, from: box, to: caller, srcResolve: unix.RESOLVE_NO_XDEV, budget: budget}
	src := BoxPath(from)
	fd, st, err := openBoxSource(t, rootFD, src, box, true)
	if err != nil {
		return err
	}
	if dst.dir < 0 {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			unix.Close(fd)
			return fmt.Errorf("%s cannot hold a directory", dst.path)
		}
		defer unix.Close(fd)
		out, err := openCopyOutput(t, caller, dst, st.Mode)
		if err != nil {
			return err
		}
		defer out.Close()
		return tc.copyData(fd, int(out.Fd()), st.Size)
	}
	if err := tc.copyTop(fd, &st, dst.dir, dst.name); err != nil {
		return fmt.Errorf("to %s: %w", dst.path, err)
	}
	return nil
}

// copyTop copies the open source src (its stat st; closed here) to name
// in the destination directory dir.
func (c *treeCopy) copyTop(src int, st *unix.Stat_t, dir int, name string) error {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		defer unix.Close(src)
		if err := c.budget.file(); err != nil {
			return err
		}
		return c.copyFile(src, st, dir, name)
	}
	dfd, err := c.makeDir(dir, name, st.Mode&0o777)
	if err != nil {
		unix.Close(src)
		return err
	}
	c.dstRoot, c.links = dfd, map[fileID]string{}
	return c.tree(src, dfd)
}

// makeDir creates (or takes the existing) directory name in dir, with the
// destination's rights, and opens it.
func (c *treeCopy) makeDir(dir int, name string, perm uint32) (int, error) {
	if err := c.t.Become(c.to); err != nil {
		return -1, err
	}
	if !c.dstInBox {
		perm = 0o755
	}
	if err := unix.Mkdirat(dir, name, perm); err != nil && err != unix.EEXIST {
		return -1, err
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, openErr(err)
	}
	return fd, nil
}

// dirFrame is one directory being copied.
type dirFrame struct {
	src, dst int
	names    []string
	rel      string // below the destination root
}

// tree copies the directory src into dst (both closed here), iteratively:
// each level holds its two descriptors and its list of names.
func (c *treeCopy) tree(src, dst int) error {
	var stack []*dirFrame
	defer func() {
		for _, f := range stack {
			unix.Close(f.src)
			unix.Close(f.dst)
		}
	}()
	push := func(src, dst int, rel string) error {
		f := &dirFrame{src: src, dst: dst, rel: rel}
		stack = append(stack, f)
		if len(stack) > CopyMaxDepth {
			return fmt.Errorf("deeper than %d levels", CopyMaxDepth)
		}
		var err error
		f.names, err = c.readNames(src)
		return err
	}
	if err := push(src, dst, ""); err != nil {
		return err
	}
	for len(stack) > 0 {
		top := stack[len(stack)-1]
		if len(top.names) == 0 {
			unix.Close(top.src)
			unix.Close(top.dst)
			stack = stack[:len(stack)-1]
			continue
		}
		name := top.names[0]
		top.names = top.names[1:]
		rel := filepath.Join(top.rel, name)
		child, st, err := c.openEntry(top.src, name)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if child < 0 {
			continue // a symlink or a mount: skipped
		}
		if err := c.budget.file(); err != nil {
			unix.Close(child)
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			dfd, err := c.makeDir(top.dst, name, st.Mode&0o777)
			if err != nil {
				unix.Close(child)
				return fmt.Errorf("%s: %w", rel, err)
			}
			if err := push(child, dfd, rel); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			continue
		}
		err = c.copyLinked(child, &st, top.dst, name, rel)
		unix.Close(child)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	}
	return nil
}

// readNames lists the directory dir with the source's rights, bounded by
// the files the budget has left.
func (c *treeCopy) readNames(dir int) ([]string, error) {
	if err := c.t.Become(c.from); err != nil {
		return nil, err
	}
	dup, err := unix.FcntlInt(uintptr(dir), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	limit := c.budget.files + 1
	if limit <= 0 || limit > 1<<20 {
		limit = 1 << 20
	}
	names, err := f.Readdirnames(limit)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(names) > c.budget.files {
		return nil, errors.New("more files than a copy allows")
	}
	return names, nil
}

// openEntry opens name in the source directory dir with the source's
// rights, never through a symlink: -1 for a symlink or (on the box side)
// a mount, which are skipped.
func (c *treeCopy) openEntry(dir int, name string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := c.t.Become(c.from); err != nil {
		return -1, st, err
	}
	how := &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | c.srcResolve,
	}
	fd, err := unix.Openat2(dir, name, how)
	if err == unix.ELOOP || err == unix.EXDEV {
		return -1, st, nil
	}
	if err != nil {
		return -1, st, err
	}
	if st, err = checkFile(fd, true); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// copyLinked copies a regular file, or links it to its first copy when
// its inode was copied already.
func (c *treeCopy) copyLinked(src int, st *unix.Stat_t, dir int, name, rel string) error {
	if st.Nlink > 1 {
		id := fileID{st.Dev, st.Ino}
		if first, ok := c.links[id]; ok {
			if c.link(first, dir, name) == nil {
				return nil
			}
		} else {
			c.links[id] = rel
		}
	}
	return c.copyFile(src, st, dir, name)
}

// link makes name in dir a hard link to first (a path below the
// destination root, resolved without symlinks).
func (c *treeCopy) link(first string, dir int, name string) error {
	if err := c.t.Become(c.to); err != nil {
		return err
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV}
	pfd, err := unix.Openat2(c.dstRoot, filepath.Dir(first), how)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return unix.Linkat(pfd, filepath.Base(first), dir, name, 0)
}

// copyFile copies the regular file src to name in dir.
func (c *treeCopy) copyFile(src int, st *unix.Stat_t, dir int, name string) error {
	if err := c.t.Become(c.to); err != nil {
		return err
	}
	var out int
	if c.dstInBox {
		fd, err := c.createInBox(dir, name, st.Mode&0o777)
		if err != nil {
			return err
		}
		out = fd
	} else {
		f, err := openCopyOutput(c.t, c.to, &HostPath{path: name, dir: dir, name: name}, st.Mode)
		if err != nil {
			return err
		}
		out = int(f.Fd())
		defer f.Close()
	}
	if c.dstInBox {
		defer unix.Close(out)
	}
	return c.copyData(src, out, st.Size)
}

// createInBox creates (or truncates) the regular file name in the box
// directory dir as the box user: never through a symlink, never onto a
// device or a file bound from the host.
func (c *treeCopy) createInBox(dir int, name string, perm uint32) (int, error) {
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, perm)
	if err != nil {
		return -1, openErr(err)
	}
	fail := func(err error) (int, error) { unix.Close(fd); return -1, err }
	st, err := checkFile(fd, false)
	if err != nil {
		return fail(err)
	}
	if same, err := sameMount(dir, fd); err != nil {
		return fail(err)
	} else if !same {
		return fail(errors.New("is a mount point (a file bound into the box)"))
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return fail(err)
	}
	// The mode of a file the box user created; one it may only write
	// keeps its owner's.
	if st.Uid == uint32(c.to.UID) {
		if err := unix.Fchmod(fd, perm); err != nil {
			return fail(err)
		}
	}
	return fd, nil
}

// sameMount reports whether two descriptors are on the same mount.
func sameMount(a, b int) (bool, error) {
	var sa, sb unix.Statx_t
	if err := unix.Statx(a, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &sa); err != nil {
		return false, err
	}
	if err := unix.Statx(b, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &sb); err != nil {
		return false, err
	}
	return sa.Mnt_id == sb.Mnt_id, nil
}

// copyData copies size bytes of src to dst, data only: holes stay holes
// (SEEK_DATA/SEEK_HOLE), and only data counts against the budget.
func (c *treeCopy) copyData(src, dst int, size int64) error {
	if c.buf == nil {
		c.buf = make([]byte, 1<<20)
	}
	for off := int64(0); off < size; {
		data, err := unix.Seek(src, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // only a hole is left
		}
		hole := size
		if err != nil {
			data = off // no hole support: all data
		} else if h, err := unix.Seek(src, data, unix.SEEK_HOLE); err == nil && h < size {
			hole = h
		}
		for data < hole {
			n := min(int64(len(c.buf)), hole-data) // the budget's unit too
			if err := c.budget.take(n); err != nil {
				return err
			}
			r, err := c.copyRange(src, dst, data, n)
			if err != nil {
				return err
			}
			if r == 0 {
				hole, size = data, data // the file shrank
				break
			}
			c.budget.bytes += n - int64(r)
			data += int64(r)
		}
		off = hole
	}
	return unix.Ftruncate(dst, size)
}

// copyRange copies up to n bytes at off from src to the same offset of
// dst: in the kernel (sendfile) where it can, else through the buffer.
func (c *treeCopy) copyRange(src, dst int, off, n int64) (int, error) {
	if !c.noSendfile {
		if _, err := unix.Seek(dst, off, io.SeekStart); err == nil {
			in := off
			r, err := unix.Sendfile(dst, src, &in, int(n))
			if err == nil {
				return r, nil
			}
			if err != unix.EINVAL && err != unix.ENOSYS {
				return 0, err
			}
		}
		c.noSendfile = true
	}
	r, err := unix.Pread(src, c.buf[:n], off)
	if err != nil {
		return 0, err
	}
	for w := 0; w < r; {
		k, err := unix.Pwrite(dst, c.buf[w:r], off+int64(w))
		if err != nil {
			return 0, err
		}
		w += k
	}
	return r, nil
}

package isolate

// A session's files, for its caller: read and written with the box user's
// rights, under /box and /tmp only, by directory descriptors, with no
// symlink followed and no mount crossed. The box's programs control every
// name in there, and may change them while the service works on them.

import (
	"errors"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
)

const (
	// removeMaxEntries bounds what one Remove deletes.
	removeMaxEntries = 100000
)

// beneath is how a session's file path is resolved below its area.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS

// sessionPath splits path (relative: to /box) into its area ("/box" or
// "/tmp") and the rest below it ("" for the area itself).
func sessionPath(p string) (area, rel string, err error) {
	bp := hostfs.BoxPath(p)
	for _, a := range []string{"/box", "/tmp"} {
		if bp == a {
			return a, "", nil
		}
		if rest, ok := strings.CutPrefix(bp, a+"/"); ok {
			return a, rest, nil
		}
	}
	return "", "", &api.FieldError{Field: "path", Msg: "a session's files are under /box and /tmp: " + p}
}

func openBeneath(dir int, rel string, flags int, mode uint32) (int, error) {
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(dir, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: beneath})
}

// inBox runs fn on a thread with the box user's rights, given the
// descriptor of path's area and the rest of path below it.
func (s *Session) inBox(p string, fn func(area int, rel string) error) error {
	areaName, rel, err := sessionPath(p)
	if err != nil {
		return err
	}
	return s.inBoxRoot(func(root int) error {
		area, err := openArea(root, areaName)
		if err != nil {
			return err
		}
		defer unix.Close(area)
		return fn(area, rel)
	})
}

// inBoxRoot runs fn on a thread with the box user's rights, given the
// descriptor of the box's root.
func (s *Session) inBoxRoot(fn func(root int) error) error {
	if s.err() != nil {
		return s.endedErr()
	}
	root, err := s.sv.openBoxRoot()
	if err != nil {
		return err
	}
	defer unix.Close(root)
	return hostfs.WithFSThread(func(t *hostfs.FSThread) error {
		if err := t.Become(s.sv.boxCred()); err != nil {
			return err
		}
		return fn(root)
	})
}

// openArea opens /box or /tmp (area) of the box whose root is root.
func openArea(root int, area string) (int, error) {
	return hostfs.OpenInBox(root, area, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
}

// errNotRegular refuses what is not a regular file (a FIFO, socket or
// device of the box is never read or written by the service).
var errNotRegular = pathField("not a regular file")

// pathField is a fault of the path the caller gave.
func pathField(msg string) error { return &api.FieldError{Field: "path", Msg: msg} }

// pathErr names the box path of a failed operation.
func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	var fe *api.FieldError
	if errors.As(err, &fe) || errors.Is(err, ErrSessionEnded) {
		return err
	}
	return &os.PathError{Op: op, Path: hostfs.BoxPath(p), Err: err}
}

// parentOf opens the directory that holds rel (below area), making what
// is missing of it when mkdir is set; and gives the last name.
func parentOf(area int, rel string, mkdir bool) (dir int, name string, err error) {
	dirPart, name := path.Split(rel)
	dir, err = unix.Dup(area)
	if err != nil {
		return -1, "", err
	}
	for _, c := range strings.Split(strings.Trim(dirPart, "/"), "/") {
		if c == "" {
			continue
		}
		if mkdir {
			if err := unix.Mkdirat(dir, c, 0o755); err != nil && err != unix.EEXIST {
				unix.Close(dir)
				return -1, "", err
			}
		}
		next, err := openBeneath(dir, c, unix.O_PATH|unix.O_DIRECTORY, 0)
		unix.Close(dir)
		if err != nil {
			return -1, "", err
		}
		dir = next
	}
	return dir, name, nil
}

func (s *Session) writeFile(p string, r io.Reader, mode os.FileMode) (int64, error) {
	var n int64
	err := s.inBox(p, func(area int, rel string) error {
		if rel == "" {
			return unix.EISDIR
		}
		dir, name, err := parentOf(area, rel, true)
		if err != nil {
			return err
		}
		defer unix.Close(dir)
		// O_NONBLOCK: a FIFO the box made there must not hold the service.
		fd, err := openBeneath(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_NONBLOCK|unix.O_NOCTTY, uint32(mode.Perm()))
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return errNotRegular
		}
		if err := unix.Ftruncate(fd, 0); err != nil {
			return err
		}
		n, err = io.Copy(onlyWriter{f}, r)
		if err != nil {
			// No partial file: a write the box's file system refused
			// (or a body that broke off) leaves nothing of it.
			unix.Ftruncate(fd, 0)
			var now unix.Stat_t
			if unix.Fstatat(dir, name, &now, unix.AT_SYMLINK_NOFOLLOW) == nil && now.Dev == st.Dev && now.Ino == st.Ino {
				unix.Unlinkat(dir, name, 0)
			}
		}
		return err
	})
	return n, pathErr("write", p, err)
}

// onlyWriter hides a file's ReadFrom: io.Copy then writes in plain
// chunks from this thread (copy_file_range or splice could run elsewhere).
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(b []byte) (int, error) { return o.w.Write(b) }

func (s *Session) openFile(p string) (*os.File, FileInfo, error) {
	var f *os.File
	var info FileInfo
	err := s.inBox(p, func(area int, rel string) error {
		fd, err := openBeneath(area, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return unix.EISDIR
			}
			return errNotRegular
		}
		f = os.NewFile(uintptr(fd), hostfs.BoxPath(p))
		info = fileInfo(hostfs.BoxPath(p), &st)
		return nil
	})
	return f, info, pathErr("open", p, err)
}

func fileInfo(boxP string, st *unix.Stat_t) FileInfo {
	return FileInfo{
		Name:    path.Base(boxP),
		Path:    boxP,
		Size:    st.Size,
		Mode:    fileMode(st.Mode),
		IsDir:   st.Mode&unix.S_IFMT == unix.S_IFDIR,
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
	}
}

// fileMode is os.FileMode of a stat's st_mode.
func fileMode(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= os.ModeDir
	case unix.S_IFLNK:
		mode |= os.ModeSymlink
	case unix.S_IFIFO:
		mode |= os.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= os.ModeSocket
	case unix.S_IFCHR:
		mode |= os.ModeDevice | os.ModeCharDevice
	case unix.S_IFBLK:
		mode |= os.ModeDevice
	}
	return mode
}

func (s *Session) stat(p string) (FileInfo, error) {
	var info FileInfo
	err := s.inBox(p, func(area int, rel string) error {
		var st unix.Stat_t
		if rel == "" {
			if err := unix.Fstat(area, &st); err != nil {
				return err
			}
		} else {
			dir, name, err := parentOf(area, rel, false)
			if err != nil {
				return err
			}
			defer unix.Close(dir)
			if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
		}
		info = fileInfo(hostfs.BoxPath(p), &st)
		return nil
	})
	return info, pathErr("stat", p, err)
}

func (s *Session) list(p string, maxEntries int) ([]FileInfo, error) {
	var out []FileInfo
	err := s.inBox(p, func(area int, rel string) error {
		fd, err := openBeneath(area, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		d := os.NewFile(uintptr(fd), hostfs.BoxPath(p))
		defer d.Close()
		names, err := d.Readdirnames(maxEntries + 1)
		if err != nil && err != io.EOF {
			return err
		}
		if len(names) > maxEntries {
			return pathField("more than " + strconv.Itoa(maxEntries) + " entries")
		}
		for _, name := range names {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue // gone meanwhile
			}
			out = append(out, fileInfo(path.Join(hostfs.BoxPath(p), name), &st))
		}
		return nil
	})
	return out, pathErr("list", p, err)
}

func (s *Session) remove(p string) error {
	err := s.inBox(p, func(area int, rel string) error {
		if rel == "" {
			return &api.FieldError{Field: "path", Msg: "cannot remove " + hostfs.BoxPath(p) + " itself"}
		}
		dir, name, err := parentOf(area, rel, false)
		if err != nil {
			return err
		}
		defer unix.Close(dir)
		left := removeMaxEntries
		return removeAt(dir, name, 0, &left)
	})
	return pathErr("remove", p, err)
}

// removeAt removes name in dir, a directory with what it holds, depth
// first, by descriptors: never through a symlink, never across a mount.
func removeAt(dir int, name string, depth int, left *int) error {
	if *left--; *left < 0 {
		return pathField("more than " + strconv.Itoa(removeMaxEntries) + " files to remove")
	}
	err := unix.Unlinkat(dir, name, 0)
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	if depth >= hostfs.CopyMaxDepth {
		return pathField("more than " + strconv.Itoa(hostfs.CopyMaxDepth) + " levels deep to remove")
	}
	fd, err := openBeneath(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	for {
		names, rerr := d.Readdirnames(256)
		for _, n := range names {
			if err := removeAt(fd, n, depth+1, left); err != nil && err != unix.ENOENT {
				d.Close()
				return err
			}
		}
		if rerr != nil || len(names) == 0 {
			break
		}
		// (Entries removed: read the directory again from its start.)
		if _, err := d.Seek(0, io.SeekStart); err != nil {
			break
		}
	}
	d.Close()
	return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
}

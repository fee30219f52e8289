package isolate

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// boxPath makes a path given by the user absolute inside the box: relative
// paths are relative to /box.
func boxPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/box/" + p
	}
	return filepath.Clean(p)
}

// openInBox opens path inside the box whose root directory is rootFD,
// resolving every symlink as the box sees it: nothing can lead out of the
// box (RESOLVE_IN_ROOT), and no /proc magic link is followed.
func openInBox(rootFD int, path string, flags int, mode uint32) (int, error) {
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	return unix.Openat2(rootFD, strings.TrimPrefix(path, "/"), how)
}

// copyIn copies a host file or directory into the box, owned by the box
// user (host uid owner).
func copyIn(rootFD int, c Copy, owner int) error {
	dst := boxPath(c.To)
	return copyInPath(rootFD, c.From, dst, owner)
}

func copyInPath(rootFD int, src, dst string, owner int) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	parent, err := openInBox(rootFD, filepath.Dir(dst), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("open %s in the box: %w", filepath.Dir(dst), err)
	}
	defer unix.Close(parent)
	name := filepath.Base(dst)
	if fi.IsDir() {
		if err := unix.Mkdirat(parent, name, uint32(fi.Mode().Perm())); err != nil && err != unix.EEXIST {
			return fmt.Errorf("create %s in the box: %w", dst, err)
		}
		if err := unix.Fchownat(parent, name, owner, owner, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if e.Type()&os.ModeSymlink != 0 {
				continue // a host symlink means nothing inside the box
			}
			if err := copyInPath(rootFD, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), owner); err != nil {
				return err
			}
		}
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fd, err := unix.Openat(parent, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(fi.Mode().Perm()))
	if err != nil {
		return fmt.Errorf("create %s in the box: %w", dst, err)
	}
	out := os.NewFile(uintptr(fd), dst)
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("copy %s into the box: %w", src, err)
	}
	return out.Chown(owner, owner)
}

// copyOut copies a file or directory of the box to the host. Symlinks are
// resolved inside the box only; inside a copied directory they are skipped.
func copyOut(rootFD int, c Copy) error {
	src := boxPath(c.From)
	fd, err := openInBox(rootFD, src, unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("open %s in the box: %w", src, err)
	}
	return copyOutFD(fd, src, c.To)
}

func copyOutFD(fd int, src, dst string) error {
	in := os.NewFile(uintptr(fd), src)
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		names, err := in.Readdirnames(-1)
		if err != nil {
			return err
		}
		for _, n := range names {
			how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS}
			cfd, err := unix.Openat2(fd, n, how)
			if err != nil {
				if err == unix.ELOOP {
					continue // a symlink: skipped
				}
				return fmt.Errorf("open %s/%s in the box: %w", src, n, err)
			}
			if err := copyOutFD(cfd, src+"/"+n, filepath.Join(dst, n)); err != nil {
				return err
			}
		}
		return nil
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s in the box is not a regular file", src)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

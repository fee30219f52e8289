package isolate

// Directories and renames of a session's files, under session_files.go's
// rule: the box user's rights, /box and /tmp only, by directory
// descriptors, no symlink followed and no mount crossed.

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
)

// MakeDir makes the directory path and what is missing above it.
// created is false when a directory was there already; anything else
// there is an error.
func (s *Session) MakeDir(path string) (created bool, info FileInfo, err error) {
	err = s.inBox(path, func(area int, rel string) error {
		var st unix.Stat_t
		if rel == "" {
			if err := unix.Fstat(area, &st); err != nil {
				return err
			}
			info = fileInfo(hostfs.BoxPath(path), &st)
			return nil
		}
		dir, name, err := parentOf(area, rel, true)
		if err != nil {
			return err
		}
		defer unix.Close(dir)
		err = unix.Mkdirat(dir, name, 0o755)
		if err != nil && err != unix.EEXIST {
			return err
		}
		created = err == nil
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return unix.EEXIST
		}
		info = fileInfo(hostfs.BoxPath(path), &st)
		return nil
	})
	return created, info, pathErr("mkdir", path, err)
}

// Rename moves from to to (both under /box or /tmp), replacing what to
// names as rename(2) does; the entry itself moves, a symlink included.
// Missing directories above to are an error, as /box and /tmp
// themselves are.
func (s *Session) Rename(from, to string) (FileInfo, error) {
	fromArea, fromRel, err := sessionPath(from)
	if err != nil {
		return FileInfo{}, err
	}
	toArea, toRel, err := sessionPath(to)
	if err != nil {
		return FileInfo{}, renameToField(err)
	}
	if fromRel == "" || toRel == "" {
		return FileInfo{}, pathField("/box and /tmp themselves are not renamed")
	}
	var info FileInfo
	err = s.inBoxRoot(func(root int) error {
		open := func(area, rel string) (int, string, error) {
			a, err := openArea(root, area)
			if err != nil {
				return -1, "", err
			}
			defer unix.Close(a)
			return parentOf(a, rel, false)
		}
		fromDir, fromName, err := open(fromArea, fromRel)
		if err != nil {
			return err
		}
		defer unix.Close(fromDir)
		toDir, toName, err := open(toArea, toRel)
		if err != nil {
			return err
		}
		defer unix.Close(toDir)
		if err := unix.Renameat(fromDir, fromName, toDir, toName); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(toDir, toName, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		info = fileInfo(hostfs.BoxPath(to), &st)
		return nil
	})
	return info, pathErr("rename", from, err)
}

// renameToField names a rename's destination as the field at fault.
func renameToField(err error) error {
	var fe *api.FieldError
	if errors.As(err, &fe) {
		return &api.FieldError{Field: "to", Msg: fe.Msg}
	}
	return err
}

package rootfs

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// MountTmpfs creates a tmpfs of size bytes (0: the kernel's default, half
// of memory) whose root is owned by uid:gid with mode, as a detached
// mount (see MountSquashfs): held by its descriptor alone, it goes with
// its last holder however that dies. nosuid and nodev.
func MountTmpfs(size int64, uid, gid int, mode os.FileMode) (*Mounted, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fs)
	opts := [][2]string{{"source", "isolate-box"}, {"mode", strconv.FormatUint(uint64(mode.Perm()), 8)},
		{"uid", strconv.Itoa(uid)}, {"gid", strconv.Itoa(gid)}}
	if size > 0 {
		opts = append(opts, [2]string{"size", strconv.FormatInt(size, 10)})
	}
	for _, o := range opts {
		if err := unix.FsconfigSetString(fs, o[0], o[1]); err != nil {
			return nil, fmt.Errorf("fsconfig tmpfs %s=%s: %w", o[0], o[1], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, fmt.Errorf("create tmpfs: %w", err)
	}
	fd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("fsmount tmpfs: %w", err)
	}
	return &Mounted{file: os.NewFile(uintptr(fd), "tmpfs")}, nil
}

// AttachAt mounts m on directory dir of the host (dir's last component is
// not followed if it is a link), and drops this holder's descriptor: the
// mount then lives until someone unmounts it.
func (m *Mounted) AttachAt(dir string) error {
	target, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(target)
	if err := unix.MoveMount(int(m.file.Fd()), "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount on %s: %w", dir, err)
	}
	return m.Close()
}

// Unmount unmounts every file system mounted on directory dir (not
// following a link there); a directory with none is left as it is. Lazy:
// a file still open in it does not stop it.
func Unmount(dir string) error {
	for i := 0; i < 64; i++ {
		var st, parent unix.Stat_t
		if err := unix.Lstat(dir, &st); err != nil {
			if err == unix.ENOENT {
				return nil
			}
			return err
		}
		if err := unix.Lstat(dir+"/..", &parent); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev == parent.Dev {
			return nil
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return fmt.Errorf("unmount %s: still a mount point after 64 unmounts", dir)
}

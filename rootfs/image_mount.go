package rootfs

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A squashfs image is mounted for a run, never on the host's mount table:
//
//  1. the supervisor attaches the file to a free loop device with
//     LOOP_CONFIGURE, read-only and LO_FLAGS_AUTOCLEAR;
//  2. it creates a *detached* mount of that device with fsopen/fsconfig/
//     fsmount: a mount object held by a file descriptor only, in no mount
//     namespace, invisible in /proc/self/mountinfo;
//  3. it closes the loop device (the mount holds it) and passes the mount's
//     descriptor to the box's init, which binds the image's /usr, /bin,
//     /lib* from /proc/self/fd/N into the box's own mount namespace.
//
// When the last holder goes (the box's namespace dies, the supervisor and
// init close their descriptors), the kernel drops the mount and, through
// autoclear, detaches the loop device. However the supervisor dies, nothing
// stays mounted or attached. Several runs can share one Mounted (exec's
// compile and run): they then share the superblock and its page cache.

// Mounted is a squashfs image mounted read-only, held by a descriptor.
type Mounted struct {
	file *os.File
	// Device is the loop device (for messages and tests).
	Device string
	dir    string // see HeldDir
	remove func()
}

// MountSquashfs attaches path to a loop device and mounts it, detached.
func MountSquashfs(path string) (*Mounted, error) {
	dev, loop, err := attachLoop(path)
	if err != nil {
		return nil, fmt.Errorf("attach %s to a loop device: %w", path, err)
	}
	// The mount takes its own reference on the device: with autoclear,
	// closing ours leaves the device alive exactly as long as the mount.
	defer unix.Close(loop)
	fd, err := fsmountSquashfs(dev)
	if err != nil {
		return nil, fmt.Errorf("mount %s (%s): %w", path, dev, err)
	}
	return &Mounted{file: os.NewFile(uintptr(fd), "image:"+path), Device: dev}, nil
}

// File is the descriptor of the mount, to pass to a box's init.
func (m *Mounted) File() *os.File { return m.file }

// Path is where this process sees the image's root.
func (m *Mounted) Path() string { return "/proc/self/fd/" + strconv.Itoa(int(m.file.Fd())) }

// Close drops this holder's reference (and, for a HeldDir, removes the
// directory).
func (m *Mounted) Close() error {
	err := m.file.Close()
	if m.remove != nil {
		m.remove()
	}
	return err
}

// HeldDir stands host directory path, open as dir, in for a mount: for a
// user who is not root, who cannot mount one. remove runs at Close.
func HeldDir(path string, dir *os.File, remove func()) *Mounted {
	return &Mounted{file: dir, dir: path, remove: remove}
}

// Dir is a HeldDir's path: a box binds it by path, in its own mount
// namespace (a directory of the host's, unlike a detached mount, cannot
// be bound through a descriptor from another mount namespace). "" for a
// mount.
func (m *Mounted) Dir() string { return m.dir }

// attachLoop binds path to a free loop device, read-only, cleared on last
// close. It returns the device's name and an open descriptor of it.
func attachLoop(path string) (string, int, error) {
	backing, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, err
	}
	defer unix.Close(backing)
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, err
	}
	defer unix.Close(ctl)
	// Another process may take the device between GET_FREE and CONFIGURE:
	// then CONFIGURE says EBUSY and we ask for another.
	for try := 0; try < 64; try++ {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", -1, fmt.Errorf("find a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", -1, fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing)}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_READ_ONLY
		err = unix.IoctlLoopConfigure(fd, &cfg)
		if err == nil {
			return dev, fd, nil
		}
		unix.Close(fd)
		if !errors.Is(err, unix.EBUSY) {
			return "", -1, fmt.Errorf("configure %s: %w", dev, err)
		}
	}
	return "", -1, errors.New("every free loop device was taken by someone else")
}

// fsmountSquashfs creates a detached read-only mount of a squashfs device.
func fsmountSquashfs(dev string) (int, error) {
	fs, err := unix.Fsopen("squashfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen squashfs: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetString(fs, "source", dev); err != nil {
		return -1, fmt.Errorf("fsconfig source: %w", err)
	}
	if err := unix.FsconfigSetFlag(fs, "ro"); err != nil {
		return -1, fmt.Errorf("fsconfig ro: %w", err)
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("fsconfig create: %w", err)
	}
	fd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	return fd, nil
}

// IsSquashfs tells whether path is a squashfs file (by its magic number).
func IsSquashfs(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := f.ReadAt(magic, 0); err != nil {
		return false
	}
	return string(magic) == "hsqs"
}

// source is where init finds the image's files: Image unless the image is
// a mount passed as a descriptor, which init sees under another number.
func (l *Layout) source() string {
	if l.ImageSource != "" {
		return l.ImageSource
	}
	return l.Image
}

// Package dirent lists a directory by its descriptor.
package dirent

import "golang.org/x/sys/unix"

// Names lists directory fd's entries but "." and "..".
func Names(fd int) ([]string, error) {
	var names []string
	// Small: each 4 KiB of a buffer this short-lived process touches first
	// is a page fault, dear on a virtual machine.
	var buf [4 << 10]byte
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

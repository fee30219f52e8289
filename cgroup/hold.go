package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A hold keeps the parents ("isolate") of box cgroups while a persistent
// box is initialised. Without one, a run of such a box, often the only
// box in its parents, makes them and removes them again: a v1 parent is
// a directory in each hierarchy, and the pair is half of what a run pays
// for its cgroups (BenchmarkCreateDestroy). A hold is an empty cgroup
// beside the boxes, "hold-" and the box's name, which the parents cannot
// be removed with; it goes with the box (ReleaseHold).

// holdPrefix begins a hold's name.
const holdPrefix = "hold-"

// Hold makes the hold of box name in each parent and returns the
// directories made, for ReleaseHold. Nothing is left made on failure.
func (m *Manager) Hold(name string) ([]string, error) {
	if err := m.ensureParents(); err != nil {
		return nil, err
	}
	var dirs []string
	for _, parent := range m.parents {
		dir := filepath.Join(parent, holdPrefix+name)
		if err := unix.Mkdir(dir, 0o755); err != nil && err != unix.EEXIST {
			ReleaseHold(dirs)
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

// ReleaseHold removes the holds that Hold made (dirs, as it returned
// them: read back from where the box keeps them, so each must name a
// hold in a parent of box cgroups on a cgroup file system), then their
// parents if nothing else is in them.
func ReleaseHold(dirs []string) error {
	var errs []error
	for _, dir := range dirs {
		if err := isHold(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := unix.Rmdir(dir); err != nil && err != unix.ENOENT {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
			continue
		}
		// Fails while a box or another hold is in it (EBUSY): fine.
		syscall.Rmdir(filepath.Dir(dir))
	}
	return errors.Join(errs...)
}

// isHold checks that dir names a hold: an absolute, clean path
// .../isolate/hold-NAME on a cgroup file system.
func isHold(dir string) error {
	parent := filepath.Dir(dir)
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || !strings.HasPrefix(filepath.Base(dir), holdPrefix) ||
		filepath.Base(parent) != parentName {
		return fmt.Errorf("%q is not a hold of box cgroups", dir)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(parent, &fs); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone already
		}
		return fmt.Errorf("%s: %w", parent, err)
	}
	if fs.Type != unix.CGROUP_SUPER_MAGIC && fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%q is not on a cgroup file system", dir)
	}
	return nil
}

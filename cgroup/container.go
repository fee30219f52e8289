package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// In a container on a cgroup v2 host the runtime gives the container a
// cgroup of its own and a cgroup namespace rooted at it: /proc/self/cgroup
// reads "0::/" and /sys/fs/cgroup is that cgroup. The service, the
// container's process, sits in it, and by the kernel's no-internal-process
// rule a cgroup that holds processes cannot enable controllers for its
// children. The namespace root is the container's own (the runtime made it
// for the container and removes it with the container), so the service
// does what the rootless path does in a delegated scope
// (PrepareDelegated): it moves itself into the leaf supervisorLeaf and
// enables the box controllers in the namespace root. It moves no process
// but its own: if another is there (a wrapper shell as the container's
// PID 1, an exec'd command), it refuses and says so.

// containerRoot tells whether mnt, the cgroup2 mount, is the root of a
// cgroup namespace that is not the hierarchy's root, own being this
// process's cgroup in it ("/", or the leaf it moved itself to). The
// hierarchy's root has no cgroup.events; every other cgroup has one.
func containerRoot(mnt, own string) bool {
	if own != "/" && own != "/"+supervisorLeaf {
		return false
	}
	_, err := os.Stat(filepath.Join(mnt, "cgroup.events"))
	return err == nil
}

// containerMu serialises prepareContainer among this process's
// goroutines: the move and the write happen once.
var containerMu sync.Mutex

// prepareContainer enables the box controllers for the children of root,
// the cgroup namespace root this process runs in (containerRoot), moving
// this process first into the leaf supervisorLeaf beside the boxes. It
// does nothing once they are enabled. Another process in root (one not
// this one) is left where it is, and the error names it.
func prepareContainer(root string) error {
	containerMu.Lock()
	defer containerMu.Unlock()
	want, err := missingControllers(filepath.Join(root, "cgroup.subtree_control"))
	if err != nil || len(want) == 0 {
		return err
	}
	if missing, err := missingControllers(filepath.Join(root, "cgroup.controllers")); err != nil {
		return err
	} else if len(missing) > 0 {
		return fmt.Errorf("the container's cgroup (the cgroup namespace root) does not offer the %s controllers: "+
			"the container runtime must give them to the container", strings.Join(missing, ", "))
	}
	if err := leaveContainerRoot(root); err != nil {
		return err
	}
	enable := "+" + strings.Join(want, " +")
	if err := writeFile(filepath.Join(root, "cgroup.subtree_control"), enable); err != nil {
		return fmt.Errorf("enable %s in the container's cgroup (the cgroup namespace root): %w", enable, err)
	}
	return nil
}

// leaveContainerRoot moves this process from root, the cgroup namespace
// root it runs in, into the leaf supervisorLeaf, so that root holds no
// process. Another process in root is left where it is, nothing is made,
// and the error names it.
func leaveContainerRoot(root string) error {
	procs, err := readFile(filepath.Join(root, "cgroup.procs"))
	if err != nil {
		return err
	}
	self := strconv.Itoa(os.Getpid())
	var others []string
	for _, p := range strings.Fields(string(procs)) {
		if p != self {
			others = append(others, p)
		}
	}
	if len(others) > 0 {
		return fmt.Errorf("the container's cgroup (the cgroup namespace root) holds processes that are not isolate's "+
			"(PID %s in the container), so it cannot enable controllers for boxes: run isolate-serve as the "+
			"container's process (its entrypoint, not a child of a shell), or set ISOLATE_CGROUP_ROOT to a "+
			"cgroup with \"+cpu +memory +pids\" in its cgroup.subtree_control", strings.Join(others, ", "))
	}
	if len(procs) > 0 {
		leaf := filepath.Join(root, supervisorLeaf)
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", leaf, err)
		}
		if err := writeFile(filepath.Join(leaf, "cgroup.procs"), self); err != nil {
			return fmt.Errorf("move isolate into %s: %w", leaf, err)
		}
	}
	return nil
}

// Prepare readies the host's cgroups for boxes now rather than at the
// first box: in a container's cgroup namespace on v2 (container.go) the
// service moves itself into its leaf while it is the container's only
// process. Elsewhere, and once done, it does nothing. A failure is
// tried again at each box until it succeeds.
func (m *Manager) Prepare() error {
	if m.container == "" {
		return nil
	}
	return prepareContainer(m.container)
}

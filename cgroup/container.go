package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
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
// root it runs in, into the leaf supervisorLeaf, and then its own
// descendants there (the boxes' inits it started before: a box's program
// alone joins the box's cgroup), so that root holds no process. A
// process in root that is not this one or a descendant is left where it
// is, and the error names it; if it is there from the start, nothing is
// made or moved.
func leaveContainerRoot(root string) error {
	self := os.Getpid()
	leaf := filepath.Join(root, supervisorLeaf)
	// Children started while this process was still in root are moved
	// after it; a few rounds catch what they started meanwhile.
	for round := 0; round < 8; round++ {
		procs, err := readFile(filepath.Join(root, "cgroup.procs"))
		if err != nil {
			return err
		}
		var own, others []string
		for _, p := range strings.Fields(string(procs)) {
			pid, err := strconv.Atoi(p)
			switch {
			case err != nil:
				return fmt.Errorf("%s/cgroup.procs: %q is no process id", root, p)
			case pid == self:
				own = append([]string{p}, own...) // this process first
			case descends(pid, self):
				own = append(own, p)
			default:
				others = append(others, p)
			}
		}
		if len(others) > 0 {
			return fmt.Errorf("the container's cgroup (the cgroup namespace root) holds processes that are not isolate's "+
				"(PID %s in the container), so it cannot enable controllers for boxes: run isolate-serve as the "+
				"container's process (its entrypoint, not a child of a shell), or set ISOLATE_CGROUP_ROOT to a "+
				"cgroup with \"+cpu +memory +pids\" in its cgroup.subtree_control", strings.Join(others, ", "))
		}
		if len(own) == 0 {
			return nil
		}
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", leaf, err)
		}
		for _, p := range own {
			// A process that ended meanwhile is no error (ESRCH).
			if err := writeFile(filepath.Join(leaf, "cgroup.procs"), p); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("move isolate's process %s into %s: %w", p, leaf, err)
			}
		}
	}
	return fmt.Errorf("the container's cgroup (the cgroup namespace root): isolate's processes kept starting there while it moved them to %s", leaf)
}

// descends tells whether process pid descends from process ancestor, by
// the parent links in /proc (at most 64 of them).
func descends(pid, ancestor int) bool {
	for depth := 0; depth < 64 && pid > 1; depth++ {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// PID (COMM) STATE PPID ...: COMM may hold spaces and parentheses.
		i := strings.LastIndexByte(string(data), ')')
		f := strings.Fields(string(data[i+1:]))
		if i < 0 || len(f) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(f[1]); err != nil {
			return false
		}
		if pid == ancestor {
			return true
		}
	}
	return false
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

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

// A cgroup made for this process to manage, which it runs in: in a
// container on a cgroup v2 host, the container's own cgroup, which the
// runtime made for it and roots its cgroup namespace at (/proc/self/cgroup
// reads "0::/", /sys/fs/cgroup is that cgroup); or a cgroup systemd
// delegated to it (a unit with Delegate=yes: systemd marks it with the
// trusted.delegate or user.delegate attribute "1"). The service sits in
// it, and by the kernel's no-internal-process rule a cgroup that holds
// processes cannot enable controllers for its children. So the service
// does what the rootless path does in a delegated scope (PrepareDelegated):
// it moves itself (and its own descendants) into the leaf supervisorLeaf
// and enables the box controllers in its cgroup. It moves no process but
// its own: if another is there (a wrapper shell as the container's PID 1,
// an exec'd command, another process of the unit), it refuses and says so.
// Any other cgroup it runs in is left as it is.

// ownPreparable finds the cgroup this process may prepare, own being its
// cgroup under mnt, the cgroup2 mount ("/", or the leaf it moved itself
// to): the root of a cgroup namespace that is not the hierarchy's root
// (which has no cgroup.events; every other cgroup has one), or a cgroup
// systemd delegated. It returns the cgroup's path under mnt and how to
// name it in messages, or "" for none.
func ownPreparable(mnt, own string) (string, string) {
	cand := own
	if filepath.Base(own) == supervisorLeaf {
		cand = filepath.Dir(own)
	}
	if cand == "/" {
		if _, err := os.Stat(filepath.Join(mnt, "cgroup.events")); err == nil {
			return "/", "the container's cgroup (the cgroup namespace root)"
		}
		return "", ""
	}
	dir := filepath.Join(mnt, cand)
	for _, attr := range []string{"trusted.delegate", "user.delegate"} {
		buf := make([]byte, 8)
		if n, err := unix.Getxattr(dir, attr, buf); err == nil && string(buf[:n]) == "1" {
			return cand, "the delegated cgroup " + cand
		}
	}
	return "", ""
}

// preparing serialises prepareOwn among this process's goroutines: the
// move and the write happen once.
var preparing sync.Mutex

// prepareOwn enables the box controllers for the children of root, the
// cgroup this process runs in and may prepare (ownPreparable; what names
// it), moving this process and its descendants first into the leaf
// supervisorLeaf beside the boxes. It does nothing once they are enabled.
// Another process in root is left where it is, and the error names it.
func prepareOwn(root, what string) error {
	preparing.Lock()
	defer preparing.Unlock()
	want, err := missingControllers(filepath.Join(root, "cgroup.subtree_control"))
	if err != nil || len(want) == 0 {
		return err
	}
	if missing, err := missingControllers(filepath.Join(root, "cgroup.controllers")); err != nil {
		return err
	} else if len(missing) > 0 {
		return fmt.Errorf("%s does not offer the %s controllers: the container runtime (or systemd) must give them to it",
			what, strings.Join(missing, ", "))
	}
	if err := leaveOwnCgroup(root, what); err != nil {
		return err
	}
	enable := "+" + strings.Join(want, " +")
	if err := writeFile(filepath.Join(root, "cgroup.subtree_control"), enable); err != nil {
		return fmt.Errorf("enable %s in %s: %w", enable, what, err)
	}
	return nil
}

// leaveOwnCgroup moves this process from root, the cgroup it runs in and
// may prepare (what names it), into the leaf supervisorLeaf, and then its own
// descendants there (the boxes' inits it started before: a box's program
// alone joins the box's cgroup), so that root holds no process. A
// process in root that is not this one or a descendant is left where it
// is, and the error names it; if it is there from the start, nothing is
// made or moved.
func leaveOwnCgroup(root, what string) error {
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
			return fmt.Errorf("%s holds processes that are not isolate's (PID %s), so it cannot enable controllers "+
				"for boxes: run isolate-serve as its only process (a container's entrypoint, not a child of a shell; "+
				"a unit of its own), or set ISOLATE_CGROUP_ROOT to a cgroup with \"+cpu +memory +pids\" in its "+
				"cgroup.subtree_control", what, strings.Join(others, ", "))
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
	return fmt.Errorf("%s: isolate's processes kept starting there while it moved them to %s", what, leaf)
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
// first box: in a container's own cgroup or a delegated one on v2
// (container.go) the service moves itself into its leaf while it is the
// only process there. Elsewhere, and once done, it does nothing. A
// failure is tried again at each box until it succeeds.
func (m *Manager) Prepare() error {
	if m.own == "" {
		return nil
	}
	return prepareOwn(m.own, m.ownWhat)
}

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Delegation is the cgroup v2 subtree a user who is not root may put
// boxes under: one delegated to it (systemd's Delegate=, or a directory
// the administrator gave it), offering the box controllers.
type Delegation struct {
	// Dir is the subtree's directory; "" when there is none (Why says
	// why).
	Dir string
	// Root is Dir as a cgroup path, for NewManager.
	Root string
	// Own: Dir is the cgroup this process runs in (found, not named).
	Own bool
	Why string
}

// DelegateHint is how a user who is not root gets a delegated subtree
// from systemd for one run.
const DelegateHint = "systemd-run --user --scope -p Delegate=yes isolate run ..."

// FindDelegated finds the subtree a user who is not root may use: dir if
// given (a directory in the cgroup2 file system), else the cgroup this
// process runs in. It only reads: PrepareDelegated makes it usable.
func FindDelegated(dir string) Delegation {
	if mode := DetectMode(); mode != V2 {
		return Delegation{Why: fmt.Sprintf("the memory, pids and cpu controllers of this host are cgroup v1 (%s layout), which are not delegated to users", mode)}
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return Delegation{Why: "read the mounts: " + err.Error()}
	}
	mnt, ok := mounts[""]
	if !ok {
		return Delegation{Why: "no cgroup2 file system is mounted"}
	}
	d := Delegation{}
	if dir == "" {
		own, err := ownCgroups()
		if err != nil {
			return Delegation{Why: "read /proc/self/cgroup: " + err.Error()}
		}
		dir, d.Own = filepath.Join(mnt, own[""]), true
	}
	dir = filepath.Clean(dir)
	if d.Own && dir == mnt {
		return Delegation{Why: "isolate runs in the root cgroup, which is not delegated to users"}
	}
	if !filepath.IsAbs(dir) || !strings.HasPrefix(dir+"/", mnt+"/") || dir == mnt {
		return Delegation{Why: fmt.Sprintf("%s is not a cgroup below %s", dir, mnt)}
	}
	missing, err := missingControllers(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return Delegation{Why: fmt.Sprintf("%s: %v", dir, errors.Unwrap(err))}
	}
	if len(missing) > 0 {
		return Delegation{Why: fmt.Sprintf("cgroup %s does not offer the %s controllers", dir, strings.Join(missing, ", "))}
	}
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control"} {
		if unix.Access(filepath.Join(dir, f), unix.W_OK) != nil {
			return Delegation{Why: fmt.Sprintf("cgroup %s is not delegated to you (%s is not writable)", dir, filepath.Join(dir, f))}
		}
	}
	d.Dir, d.Root = dir, strings.TrimPrefix(dir, mnt)
	return d
}

// supervisorLeaf is where PrepareDelegated moves this process out of its
// own delegated cgroup, which may then enable controllers for boxes.
const supervisorLeaf = "isolate-supervisor"

// PrepareDelegated enables the box controllers for d's children. A cgroup
// that holds processes cannot: in its own cgroup (a systemd scope made
// for this run) this process first moves itself into a leaf beside the
// boxes; a named subtree must hold no process.
func PrepareDelegated(d Delegation) error {
	ctl := filepath.Join(d.Dir, "cgroup.subtree_control")
	want, err := missingControllers(ctl)
	if err != nil || len(want) == 0 {
		return err
	}
	procs, err := readFile(filepath.Join(d.Dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	self := strconv.Itoa(os.Getpid())
	for _, p := range strings.Fields(string(procs)) {
		if p != self || !d.Own {
			return fmt.Errorf("cgroup %s holds processes (%s), so it cannot enable controllers for boxes: name an empty delegated cgroup with --cgroup-root", d.Dir, p)
		}
	}
	if len(procs) > 0 {
		leaf := filepath.Join(d.Dir, supervisorLeaf)
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", leaf, err)
		}
		if err := writeFile(filepath.Join(leaf, "cgroup.procs"), self); err != nil {
			return fmt.Errorf("move isolate into %s: %w", leaf, err)
		}
	}
	enable := "+" + strings.Join(want, " +")
	if err := writeFile(ctl, enable); err != nil {
		return fmt.Errorf("enable %s in %s: %w", enable, d.Dir, err)
	}
	return nil
}

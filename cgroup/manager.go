package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/isolate-sandbox/isolate/isolate/hostfs"
)

// parentName is the directory, under the cgroup this process is in, that
// holds the cgroups of all boxes. Only what is below it is ever created,
// written or removed, but for a cgroup made for this process to prepare:
// a delegated one (delegated.go) or a container's own (container.go).
const parentName = "isolate"

// v1Controllers are the v1 hierarchies a box needs.
var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct"}

// v2Controllers are the controllers a box needs on the unified hierarchy.
var v2Controllers = []string{"memory", "pids", "cpu"}

// Manager knows where box cgroups live on this host.
type Manager struct {
	mode Mode
	// mounts maps each v1 controller ("" for cgroup2) to its mount point,
	// read once.
	mounts map[string]string
	// parents maps a v1 controller to the absolute directory that holds the
	// boxes; on v2 the only key is "".
	parents map[string]string
	// own, on v2, is the cgroup this process runs in and prepares for
	// boxes, a container's or a delegated one (container.go), and ownWhat
	// its name in messages; "" elsewhere.
	own, ownWhat string
}

// NewManager finds the directories that hold box cgroups: "isolate" under
// the cgroup this process is in (per controller on v1), or under root when
// root is set (a cgroup path such as "/isolate.slice", relative to each
// hierarchy's mount point). In a container's cgroup or a delegated one on
// v2 it is "isolate" under that cgroup, not the leaf this process moves
// itself to (container.go).
func NewManager(root string) (*Manager, error) {
	mode := DetectMode()
	m := &Manager{mode: mode, parents: map[string]string{}}
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	m.mounts = mounts
	switch {
	case mode.usesV1():
		for _, c := range v1Controllers {
			mnt, ok := mounts[c]
			if !ok {
				return nil, fmt.Errorf("cgroup v1 controller %q is not mounted", c)
			}
			base := own[c]
			if root != "" {
				base = root
			}
			m.parents[c] = filepath.Join(mnt, base, parentName)
		}
	case mode == V2:
		mnt, ok := mounts[""]
		if !ok {
			return nil, errors.New("cgroup2 file system is not mounted")
		}
		base := own[""]
		if root != "" {
			base = root
		} else if own, what := ownPreparable(mnt, base); own != "" {
			base, m.own, m.ownWhat = own, filepath.Join(mnt, own), what
		}
		m.parents[""] = filepath.Join(mnt, base, parentName)
	default:
		return nil, errors.New("no cgroup file system found (mount cgroup2 at /sys/fs/cgroup)")
	}
	return m, nil
}

// Mode is the host's cgroup layout.
func (m *Manager) Mode() Mode { return m.mode }

// Parents lists the directories holding box cgroups, for diagnostics.
func (m *Manager) Parents() map[string]string { return m.parents }

// ensureParents creates the "isolate" directories (and, on v2, enables the
// box controllers in it). It is idempotent and cheap when they exist.
func (m *Manager) ensureParents() error {
	for c, dir := range m.parents {
		if _, err := os.Stat(dir); err == nil {
			continue
		}
		if c == "" && m.own != "" {
			if err := prepareOwn(m.own, m.ownWhat); err != nil {
				return err
			}
		}
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if c == "" {
			if err := enableV2Controllers(dir); err != nil {
				os.Remove(dir)
				return err
			}
		}
	}
	return nil
}

// enableV2Controllers turns on the box controllers in dir, which this
// package created. The parent of dir must already offer them: we never
// write to a cgroup we did not create.
func enableV2Controllers(dir string) error {
	missing, err := missingControllers(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		// The kernel lets a cgroup enable controllers for its children only
		// while it holds no process, and the supervisor is in it: below any
		// cgroup but the root, only a prepared root works (proven in
		// `make vmtest` from a delegated session scope).
		return fmt.Errorf("cgroup v2: controllers %s are not enabled for the children of %s (a cgroup "+
			"that holds processes, as the one isolate runs in does, cannot enable them): set "+
			"ISOLATE_CGROUP_ROOT to a cgroup with \"+cpu +memory +pids\" in its cgroup.subtree_control "+
			"(e.g. mkdir /sys/fs/cgroup/isolate.slice; echo \"+cpu +memory +pids\" > "+
			"/sys/fs/cgroup/isolate.slice/cgroup.subtree_control; ISOLATE_CGROUP_ROOT=/isolate.slice)",
			strings.Join(missing, ","), filepath.Dir(dir))
	}
	ctl := "+" + strings.Join(v2Controllers, " +")
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), ctl); err != nil {
		return fmt.Errorf("enable %q in %s: %w", ctl, dir, err)
	}
	return nil
}

// missingControllers are the box controllers (v2Controllers) that the
// controller list in file (cgroup.controllers, cgroup.subtree_control)
// lacks.
func missingControllers(file string) ([]string, error) {
	have, err := readFile(file)
	if err != nil {
		return nil, err
	}
	list := strings.Fields(string(have))
	var missing []string
	for _, c := range v2Controllers {
		if !contains(list, c) {
			missing = append(missing, c)
		}
	}
	return missing, nil
}

// Boxes lists the names of the box cgroups that exist now.
func (m *Manager) Boxes() []string {
	seen := map[string]bool{}
	var names []string
	for _, dir := range m.parents {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() && !seen[e.Name()] {
				seen[e.Name()] = true
				names = append(names, e.Name())
			}
		}
	}
	return names
}

// ownCgroups maps each v1 controller (and "" for v2) to this process's
// cgroup path, as seen under the hierarchy's mount point: where a
// container runtime bound the container's own cgroup there (a v1
// hierarchy in a container without a cgroup namespace), the path
// /proc/self/cgroup gives is relative to the hierarchy's root, and the
// mount's root is cut from it.
func ownCgroups() (map[string]string, error) {
	own, err := procCgroups()
	if err != nil {
		return nil, err
	}
	mounts, err := hostfs.Mounts()
	if err != nil {
		return nil, err
	}
	underMounts(own, mounts)
	return own, nil
}

// underMounts makes each path of own (by controller, "" for v2) relative
// to the root of the first mount of its hierarchy, where the path is
// below that root.
func underMounts(own map[string]string, mounts []hostfs.Mount) {
	seen := map[string]bool{}
	for _, m := range mounts {
		var keys []string
		switch m.FSType {
		case "cgroup2":
			keys = []string{""}
		case "cgroup":
			keys = strings.Split(m.Super, ",")
		}
		for _, k := range keys {
			p, ok := own[k]
			if !ok || seen[k] {
				continue
			}
			seen[k] = true // the first mount, as cgroupMounts takes
			if r := strings.TrimSuffix(m.Root, "/"); r != "" && (p == r || strings.HasPrefix(p, r+"/")) {
				own[k] = "/" + strings.TrimPrefix(strings.TrimPrefix(p, r), "/")
			}
		}
	}
}

// procCgroups maps each v1 controller (and "" for v2) to this process's
// cgroup path as /proc/self/cgroup gives it.
func procCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}

// cgroupMounts maps each v1 controller (and "" for cgroup2) to its mount
// point, from the mount table the binds' checks read too (one read).
func cgroupMounts() (map[string]string, error) {
	mounts, err := hostfs.Mounts()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup2":
			if _, ok := out[""]; !ok {
				out[""] = m.Point
			}
		case "cgroup":
			for _, o := range strings.Split(m.Super, ",") {
				if _, ok := out[o]; !ok {
					out[o] = m.Point
				}
			}
		}
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

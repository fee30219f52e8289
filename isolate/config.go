package isolate

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/isolate-sandbox/isolate/rootfs"
)

// ConfigPath is the host's configuration file, in ioi/isolate's format
// ("key = value" lines, # comments). Where it does not exist, ioi/isolate's
// own file is read where ioi installs it (configPaths); with none, the
// defaults. The environment variable ISOLATE_CONFIG names another file.
const ConfigPath = "/etc/isolate/config"

// configPaths are where the configuration is looked for, in this order,
// when ISOLATE_CONFIG names none: ConfigPath, then ioi/isolate's file
// where its Debian package (/etc/isolate) and its `make install`
// (/usr/local/etc/isolate) put it. A path that does not exist, that a
// file is in the way of (/etc/isolate/config under ioi's file
// /etc/isolate), or that is a directory, is passed over.
var configPaths = []string{ConfigPath, "/etc/isolate", "/usr/local/etc/isolate"}

// DefaultBoxRoot is where persistent boxes live, as in ioi/isolate.
const DefaultBoxRoot = "/var/local/lib/isolate"

// sharedStateDir is where isolate keeps its images, builds and cache,
// and where ioi/isolate's Debian package keeps its boxes (its box_root).
// As a box root it gets no tmpfs of its own (persistent_boxroot.go).
var sharedStateDir = filepath.Dir(rootfs.DefaultImagesDir)

// Config is the host's configuration.
type Config struct {
	// BoxRoot holds the persistent boxes: BoxRoot/<id>/box.
	BoxRoot string
	// CgroupRoot is where box cgroups are created (a cgroup path such as
	// "/isolate.slice"); empty: under the cgroup isolate runs in.
	CgroupRoot string
	// NumBoxes bounds box ids (0 to NumBoxes-1); at most MaxBoxes.
	NumBoxes int
	// AutoFirstBox and AutoNumBoxes are the box ids isolate picks itself
	// for a run, a session or a box built ahead that names none: a range
	// of their own, outside 0 to NumBoxes-1, so that such a box never
	// holds an id a judge may name (auto_first_box, auto_num_boxes; 0:
	// DefaultAutoFirstBox and DefaultAutoBoxes).
	AutoFirstBox, AutoNumBoxes int
	// BoxRootSize is the size of the tmpfs that holds every persistent
	// box, in bytes (0: the kernel's default, half of memory);
	// box_root_size in the file, in KiB as ioi's sizes.
	BoxRootSize int64
	// Path is the file the configuration came from ("" for defaults).
	Path string
	// AllowRlimitOnly lets runs without root go on with rlimits alone
	// where no cgroup subtree is delegated (allow_rlimit_only; as
	// --allow-rlimit-only, rootless.go).
	AllowRlimitOnly bool
	// NoSubIDs keeps runs without root on the caller's own uid even where
	// the caller has subordinate ids (use_subids = 0, rootless.go).
	NoSubIDs bool
	// Notes say how a setting of ioi/isolate's was taken where its meaning
	// here differs (isolate check shows them).
	Notes []string
	// cgAuto is the file cg_root = auto:FILE names, read once the file
	// is parsed (resolveAutoCgroup).
	cgAuto string
}

// ignoredKeys are ioi/isolate settings that are accepted and have no
// effect here, and why.
var ignoredKeys = map[string]string{
	"lock_root":       "box locks are files in " + LockDir + ", root's alone",
	"restricted_init": "persistent boxes are root's alone (a run without root gets fresh boxes of the user's)",
	"syscall_flags":   "the default syscall policy always refuses keyctl, AF_VSOCK sockets, io_uring and the legacy syscall ABIs",
}

// LoadConfig is the one place the host's settings are resolved: the file
// ISOLATE_CONFIG names, else ConfigPath (settings it does not know are an
// error naming the line, as in ioi/isolate), then the environment:
// ISOLATE_CGROUP_ROOT overrides cg_root.
func LoadConfig() (*Config, error) {
	cfg, err := loadConfigFile()
	if err != nil {
		return nil, err
	}
	if root := os.Getenv("ISOLATE_CGROUP_ROOT"); root != "" {
		cfg.CgroupRoot = root
	}
	return cfg, nil
}

func loadConfigFile() (*Config, error) {
	cfg := &Config{BoxRoot: DefaultBoxRoot, NumBoxes: DefaultNumBoxes}
	var f *os.File
	var err error
	if path := os.Getenv("ISOLATE_CONFIG"); path != "" {
		if f, err = os.Open(path); err != nil {
			return nil, fmt.Errorf("read configuration: %w", err)
		}
	} else if f, err = findConfig(configPaths); err != nil {
		return nil, err
	} else if f == nil {
		return cfg, nil
	}
	defer f.Close()
	path := f.Name()
	cfg.Path = path
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if err := cfg.set(sc.Text()); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if err := cfg.checkAutoBoxes(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := cfg.resolveAutoCgroup(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.BoxRoot == sharedStateDir {
		cfg.Notes = append(cfg.Notes, fmt.Sprintf("box_root = %s (ioi/isolate's package sets it) also holds isolate's images: "+
			"boxes are directories of the file system there, as in ioi/isolate, with no tmpfs of their own (box_root_size has no effect)", sharedStateDir))
	}
	return cfg, nil
}

// findConfig opens the first of paths that is a file (nil: none is).
func findConfig(paths []string) (*os.File, error) {
	for _, path := range paths {
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("read configuration: %w", err)
		}
		if fi, err := f.Stat(); err != nil || fi.IsDir() {
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("read configuration: %w", err)
			}
			continue
		}
		return f, nil
	}
	return nil, nil
}

// cgroupPath is the cgroup a cg_root value names: ioi/isolate names it by
// its path in /sys or relative to the hierarchy's root; both work here.
func cgroupPath(val string) string {
	val = strings.TrimPrefix(val, "/sys/fs/cgroup")
	val = strings.TrimPrefix(val, "/unified")
	return "/" + strings.Trim(val, "/")
}

// resolveAutoCgroup gives cg_root = auto:FILE ioi/isolate 2.6's meaning:
// the cgroup is the first line of FILE, which ioi's isolate-cg-keeper
// service writes when it starts (its own cgroup, delegated by systemd).
// Where FILE does not exist (no keeper runs), box cgroups go where they go
// without cg_root, and a note says so.
func (c *Config) resolveAutoCgroup() error {
	if c.cgAuto == "" {
		return nil
	}
	data, err := os.ReadFile(c.cgAuto)
	if errors.Is(err, fs.ErrNotExist) {
		c.Notes = append(c.Notes, fmt.Sprintf("cg_root = auto:%s: %s does not exist (ioi/isolate's isolate-cg-keeper writes it when it runs): "+
			"box cgroups go under isolate's own cgroup, as without cg_root", c.cgAuto, c.cgAuto))
		return nil
	} else if err != nil {
		return fmt.Errorf("cg_root = auto:%s: %w", c.cgAuto, err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	if line = strings.TrimSpace(line); !filepath.IsAbs(line) {
		return fmt.Errorf("cg_root = auto:%s: the file holds %q, not a cgroup's path", c.cgAuto, line)
	}
	if _, err := os.Stat(line); strings.HasPrefix(line, "/sys/") && err != nil {
		// The keeper's file outlives it until /run is emptied (ioi's
		// package replaced by this one, its keeper stopped).
		c.Notes = append(c.Notes, fmt.Sprintf("cg_root = auto:%s names %s, which does not exist (isolate-cg-keeper no longer runs): "+
			"box cgroups go under isolate's own cgroup, as without cg_root", c.cgAuto, line))
		return nil
	}
	c.CgroupRoot = cgroupPath(line)
	c.Notes = append(c.Notes, fmt.Sprintf("cg_root = auto:%s: box cgroups under %s (written by ioi/isolate's isolate-cg-keeper)", c.cgAuto, c.CgroupRoot))
	// The keeper enables only cpuset and memory for its cgroup's
	// children; box cgroups need pids and cpu too.
	if enabled, err := os.ReadFile(filepath.Join(line, "cgroup.subtree_control")); err == nil {
		var missing []string
		for _, ctl := range []string{"cpu", "memory", "pids"} {
			if !slices.Contains(strings.Fields(string(enabled)), ctl) {
				missing = append(missing, "+"+ctl)
			}
		}
		if len(missing) > 0 {
			c.Notes = append(c.Notes, fmt.Sprintf("%s enables no %s controller for its children, which box cgroups need: as root, "+
				"echo '%s' > %s/cgroup.subtree_control (isolate-cg-keeper enables cpuset and memory only)",
				line, strings.Join(missing, " "), strings.Join(missing, " "), line))
		}
	}
	return nil
}

// AutoBoxes is the range of box ids isolate picks itself: first, and
// how many.
func (c *Config) AutoBoxes() (first, n int) {
	first, n = c.AutoFirstBox, c.AutoNumBoxes
	if first == 0 {
		first = DefaultAutoFirstBox
	}
	if n == 0 {
		n = min(DefaultAutoBoxes, MaxBoxID+1-first)
	}
	return first, n
}

// checkAutoBoxes checks that the ids isolate picks itself are outside
// the ids callers name, and valid ids.
func (c *Config) checkAutoBoxes() error {
	first, n := c.AutoBoxes()
	if first < c.NumBoxes {
		return fmt.Errorf("auto_first_box = %d: must be num_boxes (%d) or more: the boxes isolate picks itself never take an id a judge may name", first, c.NumBoxes)
	}
	if n < 1 || first+n-1 > MaxBoxID {
		return fmt.Errorf("auto_first_box = %d, auto_num_boxes = %d: the last id must be %d at most (box N runs as uid %d+N)", first, n, MaxBoxID, FirstUID)
	}
	return nil
}

// set applies one line of the configuration file.
func (c *Config) set(line string) error {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	line = strings.TrimSpace(line)
	if line == "" {
		return nil
	}
	key, val, ok := strings.Cut(line, "=")
	if !ok {
		return fmt.Errorf("expected key = value, got %q", line)
	}
	key, val = strings.TrimSpace(key), strings.TrimSpace(val)
	switch key {
	case "box_root":
		if !filepath.IsAbs(val) || filepath.Clean(val) == "/" {
			return fmt.Errorf("box_root %q: must be an absolute path other than /", val)
		}
		c.BoxRoot = filepath.Clean(val)
	case "cg_root":
		if file, ok := strings.CutPrefix(val, "auto:"); ok {
			if file == "" {
				return fmt.Errorf("cg_root = %s: auto: names no file", val)
			}
			c.cgAuto, c.CgroupRoot = file, ""
			return nil
		}
		c.cgAuto, c.CgroupRoot = "", cgroupPath(val)
	case "subid_user":
		if val == "" {
			return fmt.Errorf("subid_user: names no user")
		}
		c.Notes = append(c.Notes, fmt.Sprintf("subid_user = %s: box N runs as uid and gid %d+N here, not as the N-th of %s's "+
			"ranges in /etc/subuid and /etc/subgid (ioi/isolate 2.6's meaning); num_boxes is as set here (default %d)", val, FirstUID, val, DefaultNumBoxes))
	case "first_uid", "first_gid":
		if v, err := strconv.Atoi(val); err != nil || v != FirstUID {
			return fmt.Errorf("%s = %s: box N runs as uid and gid %d+N here; only %d is supported", key, val, FirstUID, FirstUID)
		}
	case "box_root_size":
		v, err := strconv.ParseInt(val, 10, 64)
		if err != nil || v < 1 || v > 1<<40 {
			return fmt.Errorf("box_root_size = %s: must be a size in KiB, 1-%d", val, int64(1)<<40)
		}
		c.BoxRootSize = v << 10
	case "box_size":
		return fmt.Errorf("box_size: boxes have no file system of their own; box_root_size bounds the one they share")
	case "allow_rlimit_only":
		v, err := strconv.ParseBool(val)
		if err != nil {
			return fmt.Errorf("allow_rlimit_only = %s: must be 0 or 1", val)
		}
		c.AllowRlimitOnly = v
	case "use_subids":
		v, err := strconv.ParseBool(val)
		if err != nil {
			return fmt.Errorf("use_subids = %s: must be 0 or 1", val)
		}
		c.NoSubIDs = !v
	case "num_boxes":
		v, err := strconv.Atoi(val)
		if err != nil || v < 1 || v > MaxBoxes {
			return fmt.Errorf("num_boxes = %s: must be 1-%d", val, MaxBoxes)
		}
		c.NumBoxes = v
	case "auto_first_box":
		v, err := strconv.Atoi(val)
		if err != nil || v < 1 || v > MaxBoxID {
			return fmt.Errorf("auto_first_box = %s: must be 1-%d", val, MaxBoxID)
		}
		c.AutoFirstBox = v
	case "auto_num_boxes":
		v, err := strconv.Atoi(val)
		if err != nil || v < 1 || v > MaxBoxID {
			return fmt.Errorf("auto_num_boxes = %s: must be 1-%d", val, MaxBoxID)
		}
		c.AutoNumBoxes = v
	default:
		if _, ok := ignoredKeys[key]; ok {
			return nil
		}
		// Per-box CPU and NUMA pinning (box3.cpus = ...) is not
		// implemented; say so rather than pretend.
		if strings.HasPrefix(key, "box") && (strings.HasSuffix(key, ".cpus") || strings.HasSuffix(key, ".mems") || strings.HasSuffix(key, ".node")) {
			return fmt.Errorf("%s: per-box CPU and memory-node pinning is not supported", key)
		}
		return errors.New("unknown setting " + key)
	}
	return nil
}

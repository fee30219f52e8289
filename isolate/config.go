package isolate

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ConfigPath is the host's configuration file, in ioi/isolate's format
// ("key = value" lines, # comments). A missing file means the defaults.
// The environment variable ISOLATE_CONFIG names another file.
const ConfigPath = "/etc/isolate/config"

// DefaultBoxRoot is where persistent boxes live, as in ioi/isolate.
const DefaultBoxRoot = "/var/local/lib/isolate"

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
	// NumBoxes and DefaultAutoBoxes).
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
	path := os.Getenv("ISOLATE_CONFIG")
	explicit := path != ""
	if !explicit {
		path = ConfigPath
	}
	cfg := &Config{BoxRoot: DefaultBoxRoot, NumBoxes: DefaultNumBoxes}
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) && !explicit {
			return cfg, nil
		}
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	defer f.Close()
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
	return cfg, nil
}

// AutoBoxes is the range of box ids isolate picks itself: first, and
// how many.
func (c *Config) AutoBoxes() (first, n int) {
	first, n = c.AutoFirstBox, c.AutoNumBoxes
	if first == 0 {
		first = c.NumBoxes
		if first <= 0 {
			first = DefaultNumBoxes
		}
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
		// ioi/isolate names the delegated cgroup by its path in /sys
		// or relative to the hierarchy's root; both work here.
		val = strings.TrimPrefix(val, "/sys/fs/cgroup")
		val = strings.TrimPrefix(val, "/unified")
		c.CgroupRoot = "/" + strings.Trim(val, "/")
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

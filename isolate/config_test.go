package isolate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// loadText loads the configuration text as the file ISOLATE_CONFIG names.
func loadText(t *testing.T, text string) (*Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ISOLATE_CONFIG", path)
	t.Setenv("ISOLATE_CGROUP_ROOT", "")
	return LoadConfig()
}

// The box ids isolate picks itself are a range of their own above the
// ids callers name: num_boxes on by default, as configured otherwise,
// never overlapping 0 to num_boxes-1.
func TestAutoBoxRange(t *testing.T) {
	for _, c := range []struct {
		text        string
		first, n    int
		errContains string
	}{
		{"", 1 << 31, DefaultAutoBoxes, ""},
		{"num_boxes = 100\n", 1 << 31, DefaultAutoBoxes, ""},
		{"num_boxes = 2147483648\n", 1 << 31, DefaultAutoBoxes, ""},
		{"auto_first_box = 5000\nauto_num_boxes = 10\n", 5000, 10, ""},
		{"auto_first_box = 1000\n", 1000, DefaultAutoBoxes, ""},
		{"auto_first_box = 5000\nnum_boxes = 6000\n", 0, 0, "auto_first_box = 5000: must be num_boxes (6000) or more"},
		{"auto_first_box = 999\n", 0, 0, "auto_first_box = 999"},
		{"auto_num_boxes = 0\n", 0, 0, "auto_num_boxes = 0"},
		{"auto_first_box = 4294907294\nauto_num_boxes = 2\n", 0, 0, "the last id must be"},
	} {
		cfg, err := loadText(t, c.text)
		if c.errContains != "" {
			if err == nil || !strings.Contains(err.Error(), c.errContains) || strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("%q: error %v, want one line with %q", c.text, err, c.errContains)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.text, err)
			continue
		}
		if first, n := cfg.AutoBoxes(); first != c.first || n != c.n {
			t.Errorf("%q: ids %d and %d more, want %d and %d", c.text, first, n, c.first, c.n)
		}
	}
	// A Config made in code (no file) has the range too.
	if first, n := (&Config{NumBoxes: 10}).AutoBoxes(); first != 1<<31 || n != DefaultAutoBoxes {
		t.Errorf("Config{NumBoxes: 10}: %d and %d more", first, n)
	}
}

// A run that names no box takes an id of the range isolate picks itself,
// never one of 0 to num_boxes-1, and skips the ids it finds held.
func TestLockBoxPicksFromItsOwnRange(t *testing.T) {
	dir := t.TempDir()
	held, ok, err := tryLockBox(dir, 50)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	defer held.release()
	l, err := lockBox(dir, -1, 50, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	if l.id != 51 {
		t.Errorf("picked box %d, want 51 (50 is held, 0-49 are the callers')", l.id)
	}
	m, err := lockBox(dir, -1, 50, 3, func(id int) bool { return id == 52 })
	if err == nil {
		m.release()
		t.Fatalf("picked box %d of a range whose free id is reserved", m.id)
	}
	if !strings.Contains(err.Error(), "50-52") {
		t.Errorf("error %q does not name the range", err)
	}
}

// A lock's file goes when its holder lets go of it; one who opened the
// file before and takes the lock after finds the name no longer leads to
// it, and takes the name's new file: never two holders of one name.
func TestLockFileRemovedWhenFree(t *testing.T) {
	dir := t.TempDir()
	a, ok, err := tryLockIn(dir, "box-7")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, ok, _ := tryLockIn(dir, "box-7"); ok {
		t.Fatal("a held lock was taken again")
	}
	a.release()
	a.release() // a second release does nothing
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("after release the directory holds %v", names)
	}
	// The holder lets go between another's open and its flock: that
	// flock takes the removed inode, which tryLockIn must see, and take
	// the name's new file.
	b, ok, err := tryLockIn(dir, "box-7")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	opens := 0
	lockOpened = func() {
		if opens++; opens == 1 {
			b.release()
		}
	}
	defer func() { lockOpened = func() {} }()
	c, ok, err := tryLockIn(dir, "box-7")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	defer c.release()
	if opens != 2 {
		t.Errorf("took the lock after %d opens, want 2 (the first file was removed under it)", opens)
	}
	lockOpened = func() {}
	if _, ok, _ := tryLockIn(dir, "box-7"); ok {
		t.Error("the name's lock was taken twice")
	}
}

// ioiDebianConfig is ioi/isolate 2.6's configuration as its Debian
// package installs it (testdata).
func ioiDebianConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("testdata/ioi-2.6-debian.cf")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// ioi/isolate 2.6's configuration is accepted as its package ships it:
// subid_user is taken (with a note: box uids stay 60000+N), cg_root =
// auto:FILE reads the cgroup from FILE as ioi does when FILE exists (its
// isolate-cg-keeper writes it), and falls back to isolate's own cgroup,
// with a note, when it does not.
func TestIOIDefaultConfig(t *testing.T) {
	text := ioiDebianConfig(t)
	cfg, err := loadText(t, text)
	if err != nil {
		t.Fatalf("ioi/isolate 2.6's configuration: %v", err)
	}
	if cfg.BoxRoot != "/var/lib/isolate" || cfg.NumBoxes != DefaultNumBoxes {
		t.Errorf("box_root %q num_boxes %d", cfg.BoxRoot, cfg.NumBoxes)
	}
	notes := strings.Join(cfg.Notes, "\n")
	for _, want := range []string{"subid_user = isolate", "cg_root = auto:/run/isolate/cgroup", "box_root = /var/lib/isolate"} {
		if !strings.Contains(notes, want) {
			t.Errorf("no note on %s: %q", want, notes)
		}
	}
	if _, err := os.Stat("/run/isolate/cgroup"); os.IsNotExist(err) && cfg.CgroupRoot != "" {
		t.Errorf("with no /run/isolate/cgroup, cg_root %q, want isolate's own cgroup", cfg.CgroupRoot)
	}

	// The keeper's file, as isolate-cg-keeper writes it.
	auto := filepath.Join(t.TempDir(), "cgroup")
	withAuto := strings.Replace(text, "auto:/run/isolate/cgroup", "auto:"+auto, 1)
	if cfg, err = loadText(t, withAuto); err != nil || cfg.CgroupRoot != "" || !strings.Contains(strings.Join(cfg.Notes, "\n"), "does not exist") {
		t.Errorf("auto: with no file: cg_root %q, notes %q, %v", cfg.CgroupRoot, cfg.Notes, err)
	}
	// The keeper's cgroup gone (its package replaced, its file left in
	// /run): as with no file.
	os.WriteFile(auto, []byte("/sys/fs/cgroup/no-such.slice/isolate.service\n"), 0o644)
	if cfg, err = loadText(t, withAuto); err != nil || cfg.CgroupRoot != "" || !strings.Contains(strings.Join(cfg.Notes, "\n"), "no longer runs") {
		t.Errorf("auto: naming a cgroup that does not exist: cg_root %q, notes %q, %v", cfg.CgroupRoot, cfg.Notes, err)
	}
	// The keeper writes its own cgroup's path in /sys: this process's
	// v2 cgroup stands in for it.
	if own := ownV2Cgroup(t); own != "" {
		for _, dir := range []string{"/sys/fs/cgroup" + own, "/sys/fs/cgroup/unified" + own} {
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			os.WriteFile(auto, []byte(dir+"\n"), 0o644)
			if cfg, err = loadText(t, withAuto); err != nil || cfg.CgroupRoot != own {
				t.Errorf("auto: with the keeper's file naming %s: cg_root %q, want %s (%v)", dir, cfg.CgroupRoot, own, err)
			}
			enabled, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
			ctls := strings.Fields(string(enabled))
			if hasAll := slices.Contains(ctls, "cpu") && slices.Contains(ctls, "pids") && slices.Contains(ctls, "memory"); !hasAll &&
				!strings.Contains(strings.Join(cfg.Notes, "\n"), "cgroup.subtree_control") {
				t.Errorf("%s enables %q, and no note says to enable the rest: %q", dir, enabled, cfg.Notes)
			}
		}
	}
	t.Setenv("ISOLATE_CGROUP_ROOT", "/other")
	if cfg, err := LoadConfig(); err != nil || cfg.CgroupRoot != "/other" {
		t.Errorf("ISOLATE_CGROUP_ROOT over auto: cg_root %q, %v", cfg.CgroupRoot, err)
	}
	t.Setenv("ISOLATE_CGROUP_ROOT", "")
	for _, bad := range []string{"", "not a path\n"} {
		os.WriteFile(auto, []byte(bad), 0o644)
		if _, err = loadText(t, withAuto); err == nil || !strings.Contains(err.Error(), "cg_root = auto:"+auto) {
			t.Errorf("auto: file holding %q: %v, want an error naming cg_root", bad, err)
		}
	}
	if _, err = loadText(t, "cg_root = auto:\n"); err == nil || !strings.Contains(err.Error(), "cg_root") {
		t.Errorf("cg_root = auto: with no file: %v", err)
	}
}

// Where /etc/isolate/config does not exist, ioi/isolate's file is read
// where ioi installs it: the file /etc/isolate (its package), then
// /usr/local/etc/isolate (its make install); a directory there is passed
// over, and with none the defaults hold.
func TestConfigWhereIOIInstallsIt(t *testing.T) {
	t.Setenv("ISOLATE_CONFIG", "")
	t.Setenv("ISOLATE_CGROUP_ROOT", "")
	root := t.TempDir()
	etc := filepath.Join(root, "etc", "isolate")
	local := filepath.Join(root, "usr", "local", "etc", "isolate")
	saved := configPaths
	configPaths = []string{filepath.Join(etc, "config"), etc, local}
	defer func() { configPaths = saved }()
	load := func(what string) *Config {
		t.Helper()
		cfg, err := LoadConfig()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return cfg
	}
	if cfg := load("nothing installed"); cfg.Path != "" || cfg.BoxRoot != DefaultBoxRoot {
		t.Errorf("nothing installed: read %q, box_root %q", cfg.Path, cfg.BoxRoot)
	}
	os.MkdirAll(filepath.Dir(local), 0o755)
	os.WriteFile(local, []byte("box_root = /srv/local-boxes\n"), 0o644)
	if cfg := load("make install's file"); cfg.Path != local || cfg.BoxRoot != "/srv/local-boxes" {
		t.Errorf("make install's file: read %q, box_root %q", cfg.Path, cfg.BoxRoot)
	}
	os.MkdirAll(filepath.Dir(etc), 0o755)
	os.WriteFile(etc, []byte(ioiDebianConfig(t)), 0o644)
	if cfg := load("the package's file /etc/isolate"); cfg.Path != etc || cfg.BoxRoot != "/var/lib/isolate" {
		t.Errorf("the package's file: read %q, box_root %q", cfg.Path, cfg.BoxRoot)
	}
	os.Remove(etc)
	os.Mkdir(etc, 0o755)
	if cfg := load("a directory /etc/isolate without config"); cfg.Path != local {
		t.Errorf("a directory without config: read %q, want %s", cfg.Path, local)
	}
	os.WriteFile(filepath.Join(etc, "config"), []byte("num_boxes = 7\n"), 0o644)
	if cfg := load("/etc/isolate/config"); cfg.Path != filepath.Join(etc, "config") || cfg.NumBoxes != 7 {
		t.Errorf("/etc/isolate/config: read %q, num_boxes %d", cfg.Path, cfg.NumBoxes)
	}
}

// ioi/isolate's package's box root, /var/lib/isolate, also holds
// isolate's images: its boxes are directories of the file system there,
// beside the images, with no tmpfs mounted over them.
func TestBoxRootThatHoldsTheImages(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	root := t.TempDir()
	saved := sharedStateDir
	sharedStateDir = root
	defer func() { sharedStateDir = saved }()
	if err := os.Mkdir(filepath.Join(root, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{BoxRoot: root, NumBoxes: DefaultNumBoxes}
	dir, err := InitBox(cfg, 344, Caller(), false)
	if err != nil {
		t.Fatalf("--init in the images' directory: %v", err)
	}
	if _, _, mounted, err := topMount(realDir(root)); err != nil || mounted {
		t.Errorf("a file system was mounted on %s (%v)", root, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "box")); err != nil || !fi.IsDir() {
		t.Errorf("no box/ in %s: %v", dir, err)
	}
	if err := CleanupBox(cfg, 344, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s after --cleanup: %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(root, "images")); err != nil {
		t.Errorf("the images' directory after --cleanup: %v", err)
	}
}

// ownV2Cgroup is this process's cgroup v2 path ("": none, or the root).
func ownV2Cgroup(t *testing.T) string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && p != "/" {
			return p
		}
	}
	return ""
}

package isolate

import (
	"os"
	"path/filepath"
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
		{"", DefaultNumBoxes, DefaultAutoBoxes, ""},
		{"num_boxes = 100\n", 100, DefaultAutoBoxes, ""},
		{"num_boxes = 2147483648\n", 1 << 31, DefaultAutoBoxes, ""},
		{"auto_first_box = 5000\nauto_num_boxes = 10\n", 5000, 10, ""},
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
	if first, n := (&Config{NumBoxes: 10}).AutoBoxes(); first != 10 || n != DefaultAutoBoxes {
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

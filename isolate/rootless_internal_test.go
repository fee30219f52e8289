package isolate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/cgroup"
)

// How a run without root enforces each limit, as its report says: a
// table, no kernel needed.
func TestRootlessEnforcement(t *testing.T) {
	rlimits := &Host{rootless: &rootless{}}
	delegated := &Host{rootless: &rootless{cg: cgroup.Delegation{Dir: "/sys/fs/cgroup/u.scope"}}}
	limited := &Spec{Memory: 64 << 20, Pids: 8, CPUTime: time.Second, CPUs: 0.5}
	cases := []struct {
		name string
		h    *Host
		sp   *Spec
		want map[string]string
	}{
		{"root", &Host{}, limited, nil},
		{"rlimits", rlimits, &Spec{Memory: 1, Pids: 1}, map[string]string{"memory": "rlimit", "memory_rlimit": "address-space", "pids": "rlimit", "cpu": "none", "cpus": "none", "wall": "supervisor"}},
		{"rlimits, data", rlimits, &Spec{Memory: 1, MemoryRlimit: MemoryRlimitData, MemoryRlimitFactor: 4}, map[string]string{"memory": "rlimit", "memory_rlimit": "data", "pids": "none", "cpu": "none", "cpus": "none", "wall": "supervisor"}},
		{"rlimits, none", rlimits, &Spec{Memory: 1, MemoryRlimit: MemoryRlimitNone}, map[string]string{"memory": "none", "memory_rlimit": "none", "pids": "none", "cpu": "none", "cpus": "none", "wall": "supervisor"}},
		{"rlimits, no memory limit", rlimits, &Spec{MemoryRlimit: MemoryRlimitData}, map[string]string{"memory": "none", "pids": "none", "cpu": "none", "cpus": "none", "wall": "supervisor"}},
		{"delegated", delegated, limited, map[string]string{"memory": "cgroup", "pids": "cgroup", "cpu": "cgroup", "cpus": "cgroup", "wall": "supervisor"}},
		{"delegated, data", delegated, &Spec{Memory: 1, MemoryRlimit: MemoryRlimitData}, map[string]string{"memory": "cgroup", "pids": "none", "cpu": "none", "cpus": "none", "wall": "supervisor"}},
	}
	for _, c := range cases {
		got := c.h.enforcement(c.sp)
		if len(got) != len(c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %s enforced by %q, want %q", c.name, k, got[k], v)
			}
		}
	}
	if err := rlimits.checkWithoutRoot(limited); err == nil {
		t.Error("--cpus with rlimits alone: accepted")
	}
	if err := delegated.checkWithoutRoot(limited); err != nil {
		t.Errorf("--cpus with a delegated cgroup: %v", err)
	}
}

// The rlimits that stand in for the cgroup's limits.
func TestRlimitsForCgroup(t *testing.T) {
	cases := []struct {
		name string
		sp   Spec
		want map[int]int64
	}{
		{"none", Spec{}, map[int]int64{}},
		{"memory, pids, CPU", Spec{Memory: 64 << 20, Pids: 8, CPUTime: 1500 * time.Millisecond, ExtraTime: 200 * time.Millisecond},
			map[int]int64{unix.RLIMIT_AS: 64 << 20, unix.RLIMIT_NPROC: 9, unix.RLIMIT_CPU: 2}},
		{"ioi's smaller address space", Spec{Memory: 64 << 20, AddrSpace: 32 << 20}, map[int]int64{unix.RLIMIT_AS: 32 << 20}},
		{"whole seconds", Spec{CPUTime: time.Second}, map[int]int64{unix.RLIMIT_CPU: 1}},
	}
	for _, c := range cases {
		s := &supervisor{spec: &c.sp}
		got := map[int]int64{}
		s.rlimitsForCgroup(func(res int, v int64) { got[res] = v })
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		for res, v := range c.want {
			if got[res] != v {
				t.Errorf("%s: rlimit %d = %d, want %d", c.name, res, got[res], v)
			}
		}
	}
}

// The user's runtime directory is made the user's alone, and one that is
// not (a link, or open to others) is refused.
func TestUserRuntimeDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", tmp)
	uid := os.Getuid()
	dir, err := userRuntimeDir(uid)
	if err != nil || filepath.Dir(dir) != tmp {
		t.Fatalf("%q, %v", dir, err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "locks"), filepath.Join(dir, "root")} {
		if err := ownDir(d, uid); err != nil {
			t.Error(err)
		}
	}
	os.Chmod(filepath.Join(dir, "locks"), 0o777)
	if _, err := userRuntimeDir(uid); err == nil {
		t.Error("a locks directory open to others: accepted")
	}
	os.RemoveAll(dir)
	os.Symlink(tmp, dir)
	// A link there is passed over as another user's directory would be:
	// never followed (the user's $HOME/.cache/isolate, or an error).
	if got, err := userRuntimeDir(uid); err == nil && (got == dir || !strings.HasSuffix(got, filepath.Join(".cache", "isolate"))) {
		t.Errorf("a link as the runtime directory: %q accepted", got)
	}
	// $XDG_RUNTIME_DIR, when it is the user's alone, is preferred.
	xdg := filepath.Join(tmp, "xdg")
	os.Mkdir(xdg, 0o700)
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	if dir, err := userRuntimeDir(uid); err != nil || dir != filepath.Join(xdg, "isolate") {
		t.Errorf("with XDG_RUNTIME_DIR: %q, %v", dir, err)
	}
}

// Subordinate ranges as shadow reads them (by name or uid, the first
// usable line), a box id's place in one, and what a user without one is
// told to add.
func TestSubordinateRanges(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "subuid")
	os.WriteFile(file, []byte("# comment\nalice:100000:65536\nbob:200000:0\nbob:x:1\n1001:300000:10\nbob:400000:5\n"), 0o644)
	cases := []struct {
		name string
		uid  int
		want idRange
		ok   bool
	}{
		{"alice", 1000, idRange{100000, 65536}, true},
		{"bob", 1002, idRange{400000, 5}, true}, // a count of 0 or a bad number is skipped
		{"carol", 1001, idRange{300000, 10}, true},
		{"dave", 1003, idRange{}, false},
	}
	for _, c := range cases {
		if got, ok := subRange(file, c.name, c.uid); got != c.want || ok != c.ok {
			t.Errorf("%s: %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
	if r := (idRange{400000, 5}); r.of(3) != 400003 || r.of(7) != 400002 {
		t.Errorf("box ids 3 and 7 in 5 ids from 400000: %d %d", r.of(3), r.of(7))
	}
	old := subUIDFile
	subUIDFile = file
	defer func() { subUIDFile = old }()
	if got := freeSubStart(); got != 524288 {
		t.Errorf("a free start after ranges below 524288: %d", got)
	}
	os.WriteFile(file, []byte("alice:600000:65536\n"), 0o644)
	if got := freeSubStart(); got != 720896 {
		t.Errorf("a free start after 600000+65536: %d, want 720896", got)
	}
	// use_subids = 0 keeps the caller, whatever the files say.
	if sub, why, _ := findSubIDs(&Config{NoSubIDs: true, Path: "/etc/isolate/config"}, 0, 0); sub != nil || why != "use_subids = 0 in /etc/isolate/config" {
		t.Errorf("use_subids = 0: %v %q", sub, why)
	}
}

// With a subordinate box user PID 1 is another uid: RLIMIT_NPROC counts
// the program's tasks alone.
func TestRlimitsForCgroupSubordinate(t *testing.T) {
	h := &Host{rootless: &rootless{sub: &subIDs{uid: idRange{100000, 10}, gid: idRange{100000, 10}}}}
	s := &supervisor{host: h, spec: &Spec{Pids: 8}}
	got := map[int]int64{}
	s.rlimitsForCgroup(func(res int, v int64) { got[res] = v })
	if got[unix.RLIMIT_NPROC] != 8 {
		t.Errorf("RLIMIT_NPROC %d, want 8", got[unix.RLIMIT_NPROC])
	}
	if s.boxUser() != boxUserSubordinate {
		t.Errorf("sandbox.user %q", s.boxUser())
	}
	s.session = true
	if s.subIDs() != nil || s.boxUser() != boxUserCaller {
		t.Error("a session's box user is a subordinate id")
	}
	// A box built ahead is mapped as the run that claims it would map
	// its own: the hand-over and the report depend on it.
	s.session, s.ahead = false, true
	if s.subIDs() == nil || s.boxUser() != boxUserSubordinate {
		t.Error("a box built ahead keeps the caller as box user")
	}
}

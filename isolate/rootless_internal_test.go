package isolate

import (
	"os"
	"path/filepath"
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
		{"rlimits", rlimits, &Spec{Memory: 1, Pids: 1}, map[string]string{"memory": "rlimit", "pids": "rlimit", "cpu": "none", "cpus": "none", "wall": "supervisor"}},
		{"delegated", delegated, limited, map[string]string{"memory": "cgroup", "pids": "cgroup", "cpu": "cgroup", "cpus": "cgroup", "wall": "supervisor"}},
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
	if _, err := userRuntimeDir(uid); err == nil {
		t.Error("a link as the runtime directory: accepted")
	}
	// $XDG_RUNTIME_DIR, when it is the user's alone, is preferred.
	xdg := filepath.Join(tmp, "xdg")
	os.Mkdir(xdg, 0o700)
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	if dir, err := userRuntimeDir(uid); err != nil || dir != filepath.Join(xdg, "isolate") {
		t.Errorf("with XDG_RUNTIME_DIR: %q, %v", dir, err)
	}
}

package cgroup

// These tests create real cgroups, as root, under this process's own
// cgroup (per controller on v1) and remove them again.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates real cgroups")
	}
}

func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// boxShell is a shell that runs script inside the box, entered through
// the placement files as the box's init does it: forked into the v2
// cgroup, or writing itself into each v1 tasks file first.
func boxShell(b *Box, files []*os.File, script string) *exec.Cmd {
	if b.ForkInto() {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(files[0].Fd())}
		return cmd
	}
	var join []string
	for i := range files {
		join = append(join, fmt.Sprintf("echo 0 >&%d", 3+i))
	}
	cmd := exec.Command("/bin/sh", "-c", strings.Join(join, "; ")+"; "+script)
	cmd.ExtraFiles = files
	return cmd
}

// joinAndRun runs script in the box.
func joinAndRun(t *testing.T, b *Box, script string) {
	t.Helper()
	files, err := b.PlacementFiles()
	if err != nil {
		t.Fatal(err)
	}
	out, err := boxShell(b, files, script).CombinedOutput()
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		t.Fatalf("run in box: %v\n%s", err, out)
	}
}

// testManager is a Manager whose box parents lie in a directory of their
// own below this process's cgroups, <own>/isolate-test-PID/isolate: the
// cmd tests' boxes, made meanwhile under <own>/isolate, do not share them,
// so what a test finds there is its own doing.
func testManager(t testing.TB) *Manager {
	t.Helper()
	m, err := NewManager("")
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("isolate-test-%d", os.Getpid())
	for c, parent := range m.parents {
		dir := filepath.Join(filepath.Dir(parent), base)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			syscall.Rmdir(filepath.Join(dir, parentName)) // if a test left it
			syscall.Rmdir(dir)
		})
		if c == "" {
			if err := enableV2Controllers(dir); err != nil {
				t.Fatal(err)
			}
		}
		m.parents[c] = filepath.Join(dir, parentName)
	}
	return m
}

// The parents exist while a box does and go with the last box.
func TestParentsGoWithTheLastBox(t *testing.T) {
	requireRoot(t)
	m := testManager(t)
	a, err := m.Create("box-a", Limits{Pids: 4})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create("box-b", Limits{Pids: 4})
	if err != nil {
		a.Destroy()
		t.Fatal(err)
	}
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	// The parents of box-b's own directories (without a CPU limit, on
	// v1 it has none in the cpu hierarchy).
	for _, c := range b.controllers() {
		if _, err := os.Stat(filepath.Dir(b.dirs[c])); err != nil {
			t.Errorf("parent of %q gone while box-b lives: %v", c, err)
		}
	}
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
	for c, p := range m.Parents() {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("parent of %q, %s, left after the last box: %v", c, p, err)
		}
	}
	// And they come back with the next box.
	c, err := m.Create("box-c", Limits{})
	if err != nil {
		t.Fatalf("a box after the parents went: %v", err)
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func TestBoxLifecycle(t *testing.T) {
	requireRoot(t)
	m := testManager(t)
	if m.Mode() == V2 && m.Parents()[""] == "" {
		t.Fatal("no v2 parent")
	}
	name := fmt.Sprintf("box-test-%d", os.Getpid())
	b, err := m.Create(name, Limits{Memory: 64 << 20, Pids: 7, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Destroy()
	if b.Name() != name || b.Mode() != m.Mode() {
		t.Errorf("box %q mode %s", b.Name(), b.Mode())
	}
	if m.Mode().usesV1() {
		if got := readTrimmed(t, filepath.Join(b.dirs["memory"], "memory.limit_in_bytes")); got != "67108864" {
			t.Errorf("memory.limit_in_bytes %s", got)
		}
		if got := readTrimmed(t, filepath.Join(b.dirs["pids"], "pids.max")); got != "7" {
			t.Errorf("pids.max %s, want exactly the limit", got)
		}
		if got := readTrimmed(t, filepath.Join(b.dirs["cpu"], "cpu.cfs_quota_us")); got != "50000" {
			t.Errorf("cpu.cfs_quota_us %s", got)
		}
	}
	found := false
	for _, n := range m.Boxes() {
		found = found || n == name
	}
	if !found {
		t.Errorf("Boxes() = %v lacks %s", m.Boxes(), name)
	}
	// 16 MiB written to a pipe's reader is not charged; touching memory
	// with dd into /dev/null through a buffer is.
	joinAndRun(t, b, "dd if=/dev/zero of=/dev/null bs=8M count=4 2>/dev/null; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	used, err := b.CPUUsage()
	if err != nil || used <= 0 {
		t.Errorf("CPUUsage %v %v", used, err)
	}
	user, sys, err := b.CPUSplit()
	if err != nil || user+sys <= 0 {
		t.Errorf("CPUSplit %v %v %v", user, sys, err)
	}
	if peak, err := b.MemoryPeak(); err != nil || peak < 8<<20 || peak > 64<<20 {
		t.Errorf("MemoryPeak %d %v, want 8-64 MiB", peak, err)
	}
	if n, err := b.OOMKills(); err != nil || n != 0 {
		t.Errorf("OOMKills %d %v", n, err)
	}
	if n, err := b.PidsPeak(); err != nil || n < 1 || n > 2 {
		t.Errorf("PidsPeak %d %v", n, err)
	}
	// The pids limit holds for what the box forks (the shell fails to
	// fork past it: its status does not matter).
	joinAndRun(t, b, "(for i in 1 2 3 4 5 6 7 8 9 10; do sleep 1 & done; wait) 2>/dev/null; true")
	if n, _ := b.PidsPeak(); n != 7 {
		t.Errorf("PidsPeak %d under pids.max 7", n)
	}
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, d := range b.dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s left after Destroy", d)
		}
	}
}

func TestOOMKillCounted(t *testing.T) {
	requireRoot(t)
	m := testManager(t)
	b, err := m.Create(fmt.Sprintf("box-test-oom-%d", os.Getpid()), Limits{Memory: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Destroy()
	if n, err := growPastLimit(b); err != nil || n < 1 {
		t.Errorf("OOMKills %d %v after an OOM kill", n, err)
	}
}

// growPastLimit runs, in box b, a shell variable that grows past the
// memory limit until the OOM killer acts, and returns b's OOM kills.
func growPastLimit(b *Box) (int64, error) {
	files, _ := b.PlacementFiles()
	boxShell(b, files, `x=xxxxxxxxxxxxxxxx; while true; do x="$x$x"; done`).Run()
	for _, f := range files {
		f.Close()
	}
	return b.OOMKills()
}

// On v1 the cpu hierarchy only enforces the CPU limit: a box with limits
// but none on the CPU has no directory there (one left by an earlier box
// of its name is removed), is still accounted through cpuacct, and
// refuses a CPU limit later rather than leave it unenforced.
func TestCPUHierarchyOnlyForACPULimit(t *testing.T) {
	requireRoot(t)
	m := testManager(t)
	if !m.Mode().usesV1() {
		t.Skip("one directory holds every controller on v2")
	}
	name := fmt.Sprintf("box-test-nocpu-%d", os.Getpid())
	stale := filepath.Join(m.Parents()["cpu"], name)
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(name, Limits{Memory: 64 << 20, Pids: 4})
	if err != nil {
		os.Remove(stale)
		t.Fatal(err)
	}
	defer b.Destroy()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("cpu directory %s of a box without a CPU limit: %v", stale, err)
	}
	files, err := b.PlacementFiles()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Errorf("%d placement files, want memory, pids and cpuacct", len(files))
	}
	closeFiles(files)
	joinAndRun(t, b, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	if used, err := b.CPUUsage(); err != nil || used <= 0 {
		t.Errorf("CPUUsage %v %v", used, err)
	}
	if err := b.SetLimits(Limits{CPUs: 1}); err == nil {
		t.Error("a CPU limit set on a box without a cpu cgroup")
	}
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, d := range b.dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s left after Destroy", d)
		}
	}
}

// A cgroup left by a killed supervisor, with a process still in it, is
// removed (its process killed) when the same box is created again.
func TestStaleBoxRemoved(t *testing.T) {
	requireRoot(t)
	m := testManager(t)
	name := fmt.Sprintf("box-test-stale-%d", os.Getpid())
	b, err := m.Create(name, Limits{Pids: 4})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := b.PlacementFiles()
	sleeper := boxShell(b, files, "exec sleep 60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { sleeper.Wait(); close(done) }()
	for _, f := range files {
		f.Close()
	}
	// Wait until the sleeper is inside.
	for i := 0; i < 500 && len(procs(b.dirs[pidsKey(m)])) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	b2, err := m.Create(name, Limits{})
	if err != nil {
		t.Fatalf("re-create over a stale box: %v", err)
	}
	<-done // its process was killed
	if err := b2.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(name); err != nil {
		t.Errorf("Remove of a removed box: %v", err)
	}
}

func pidsKey(m *Manager) string {
	if m.Mode().usesV1() {
		return "pids"
	}
	return ""
}

func TestConfiguredRoot(t *testing.T) {
	requireRoot(t)
	m, err := NewManager("/isolate-test-root")
	if err != nil {
		t.Fatal(err)
	}
	for c, p := range m.Parents() {
		if !strings.Contains(p, "/isolate-test-root/isolate") {
			t.Errorf("parent of %q is %s", c, p)
		}
	}
}

// On a hybrid host the unified hierarchy is real but holds no
// controllers: the v2 code paths run against the kernel there, and the
// refusal to use a parent without controllers is what the kernel makes
// of it.
func TestV2PathsOnTheUnifiedMount(t *testing.T) {
	requireRoot(t)
	if DetectMode() != Hybrid {
		t.Skip("needs a hybrid host's (controller-less) unified mount")
	}
	mounts, err := cgroupMounts()
	if err != nil || mounts[""] == "" {
		t.Skip("no cgroup2 mount")
	}
	own, _ := ownCgroups()
	parent := filepath.Join(mounts[""], own[""], fmt.Sprintf("isolate-v2test-%d", os.Getpid()))
	m := &Manager{mode: V2, mounts: mounts, parents: map[string]string{"": parent}}
	if _, err := m.Create("box-0", Limits{Memory: 1 << 20}); err == nil || !strings.Contains(err.Error(), "not enabled") {
		t.Fatalf("v2 without controllers: %v, want a clear refusal", err)
	}
	if _, err := os.Stat(parent); !os.IsNotExist(err) {
		t.Errorf("refused parent %s left behind", parent)
	}
	// Without limits the box is only a directory: the v2 files of the
	// core (cgroup.procs, cpu.stat) are all it uses.
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(parent)
	b := &Box{mode: V2, name: "box-0", dirs: map[string]string{"": filepath.Join(parent, "box-0")}, withCPU: true}
	if err := b.makeDirs(m); err != nil {
		t.Fatal(err)
	}
	defer b.Destroy()
	joinAndRun(t, b, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	b.openAccounting()
	if used, err := b.CPUUsage(); err != nil || used <= 0 {
		t.Errorf("v2 CPUUsage %v %v", used, err)
	}
	if u, s, err := b.CPUSplit(); err != nil || u+s <= 0 {
		t.Errorf("v2 CPUSplit %v %v %v", u, s, err)
	}
	// No memory or pids controller here: their files are absent, and
	// the errors say so.
	if _, err := b.MemoryPeak(); err == nil {
		t.Error("memory.peak without the memory controller")
	}
	if _, err := b.OOMKills(); err == nil {
		t.Error("memory.events without the memory controller")
	}
	if _, err := b.PidsPeak(); err == nil {
		t.Error("pids.peak without the pids controller")
	}
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func TestStatParsing(t *testing.T) {
	data := []byte("usage_usec 1234\nuser_usec 1000\nsystem_usec 234\n")
	if v, err := statField(data, "user_usec"); err != nil || v != 1000 {
		t.Errorf("statField %d %v", v, err)
	}
	if _, err := statField(data, "nope"); err == nil {
		t.Error("statField of a missing key")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "max"), []byte("max\n"), 0o644)
	if v, err := readInt(filepath.Join(dir, "max")); err != nil || v != -1 {
		t.Errorf("readInt(max) %d %v", v, err)
	}
	if _, err := readInt(filepath.Join(dir, "missing")); err == nil {
		t.Error("readInt of a missing file")
	}
}

// SetLimits gives a box made without limits the same limits Create would
// have set, and the kernel enforces them.
func TestSetLimitsAsCreate(t *testing.T) {
	requireRoot(t)
	m := testManager(t)
	l := Limits{Memory: 16 << 20, Pids: 7, CPUs: 0.5}
	made, err := m.Create(fmt.Sprintf("box-test-made-%d", os.Getpid()), l)
	if err != nil {
		t.Fatal(err)
	}
	defer made.Destroy()
	set, err := m.Create(fmt.Sprintf("box-test-set-%d", os.Getpid()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Destroy()
	if err := set.SetLimits(l); err != nil {
		t.Fatal(err)
	}
	files := map[string][]string{
		"memory": {"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"},
		"pids":   {"pids.max"}, "cpu": {"cpu.cfs_quota_us", "cpu.cfs_period_us"},
		"": {"memory.max", "memory.swap.max", "pids.max", "cpu.max"},
	}
	compared := 0
	for ctl, names := range files {
		if _, ok := set.dirs[ctl]; !ok {
			continue
		}
		for _, n := range names {
			want, err := os.ReadFile(filepath.Join(made.dirs[ctl], n))
			if os.IsNotExist(err) {
				continue
			}
			if got := readTrimmed(t, filepath.Join(set.dirs[ctl], n)); got != strings.TrimSpace(string(want)) {
				t.Errorf("%s/%s: %s after SetLimits, %s after Create", ctl, n, got, want)
			}
			compared++
		}
	}
	if compared < 4 {
		t.Errorf("only %d limit files compared", compared)
	}
	if n, err := growPastLimit(set); err != nil || n < 1 {
		t.Errorf("OOMKills %d %v: the memory limit set at claim is not enforced", n, err)
	}
}

// benchBox is a box made as the pool makes one, without limits; it goes
// with the benchmark.
func benchBox(b *testing.B) (*Manager, *Box) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: creates real cgroups")
	}
	m := testManager(b)
	box, err := m.Create(fmt.Sprintf("box-bench-%d", os.Getpid()), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { box.Destroy() })
	return m, box
}

// What a box built ahead pays at its claim for its command's limits.
// `go test -run '^$' -bench SetLimits ./cgroup`.
func BenchmarkSetLimits(b *testing.B) {
	_, box := benchBox(b)
	l := Limits{Memory: 64 << 20, Pids: 16, CPUs: 1}
	for i := 0; i < b.N; i++ {
		if err := box.SetLimits(l); err != nil {
			b.Fatal(err)
		}
	}
}

// What a run pays for its box's cgroup: made with a judge's limits (no
// CPU bandwidth limit), then removed.
func BenchmarkCreateDestroy(b *testing.B) {
	m := testManager(b)
	name := fmt.Sprintf("box-bench-%d", os.Getpid())
	for i := 0; i < b.N; i++ {
		box, err := m.Create(name, Limits{Memory: 256 << 20, Pids: 16})
		if err != nil {
			b.Fatal(err)
		}
		if err := box.Destroy(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAccountingReads reads what a run reads from its box's cgroup
// once the program is gone (the supervisor's account).
func BenchmarkAccountingReads(b *testing.B) {
	_, box := benchBox(b)
	for i := 0; i < b.N; i++ {
		if _, err := box.CPUUsage(); err != nil {
			b.Fatal(err)
		}
		if _, err := box.MemoryPeak(); err != nil {
			b.Fatal(err)
		}
		if _, err := box.OOMKills(); err != nil {
			b.Fatal(err)
		}
		if _, err := box.PidsPeak(); err != nil {
			b.Fatal(err)
		}
	}
}

// A hold keeps the parents through a box's end; releasing it removes
// them with it. ReleaseHold takes nothing but holds.
func TestHoldKeepsTheParents(t *testing.T) {
	requireRoot(t)
	m := testManager(t)
	name := fmt.Sprintf("box-test-hold-%d", os.Getpid())
	holds, err := m.Hold(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(holds) != len(m.Parents()) {
		t.Errorf("%d holds for %d parents", len(holds), len(m.Parents()))
	}
	b, err := m.Create(name, Limits{Pids: 4})
	if err != nil {
		ReleaseHold(holds)
		t.Fatal(err)
	}
	if err := b.Destroy(); err != nil {
		t.Error(err)
	}
	for _, h := range holds {
		if _, err := os.Stat(h); err != nil {
			t.Errorf("hold %s gone with the box: %v", h, err)
		}
	}
	notCgroup := filepath.Join(t.TempDir(), "isolate", "hold-x")
	if err := os.MkdirAll(notCgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"/tmp", "relative/isolate/hold-x", notCgroup,
		filepath.Dir(holds[0]) + "/box-1", filepath.Dir(holds[0]) + "/../isolate/hold-x"} {
		if err := ReleaseHold([]string{bad}); err == nil {
			t.Errorf("ReleaseHold(%q) took it", bad)
		}
	}
	if err := ReleaseHold(holds); err != nil {
		t.Fatal(err)
	}
	for c, p := range m.Parents() {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("parent of %q, %s, left with the hold released: %v", c, p, err)
		}
	}
}

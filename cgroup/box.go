package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits are the resource limits of one box. Zero means unlimited.
type Limits struct {
	Memory int64   // bytes, page cache and tmpfs included; no swap
	Pids   int64   // processes and threads at once
	CPUs   float64 // CPU bandwidth, in CPUs
}

// cfsPeriod is the CPU bandwidth period, in microseconds.
const cfsPeriod = 100000

// Box is the cgroup (one per controller on v1) of one run.
type Box struct {
	mode Mode
	name string
	// dirs maps a v1 controller to its directory; on v2 the only key is "".
	dirs map[string]string
	// withCPU tells whether the box has its directory of v1's cpu
	// controller (always on v2, where one directory has every controller).
	withCPU bool
	// Kept open from Create to Destroy: cpuUsage is read often to enforce
	// the CPU limit; the others are read once, at the run's end, which
	// then pays no open or close (a pooled box is made long before).
	cpuUsage, memoryPeak, oomEvents, pidsPeak ctlFile
	// limits are the files SetLimits writes, kept open by Create for a
	// box made without limits: one built ahead of its command, which sets
	// them when it claims the box.
	limits *limitFiles
}

// Create makes the cgroup of box name with limits l. A cgroup of that name
// left over by a killed supervisor is removed first.
func (m *Manager) Create(name string, l Limits) (*Box, error) {
	b, err := m.create(name, l)
	if errors.Is(err, errControllersOff) {
		// Another process made the parent and had not yet enabled the
		// box controllers in it when this box was made in it (boxes built
		// ahead at a service's start): enable them, the parent being
		// ours, and make the box again (the parent too, if the box's
		// removal left it empty and removed it).
		if err := enableV2Controllers(m.parents[""]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		b, err = m.create(name, l)
	}
	return b, err
}

// errControllersOff: a v2 box made without its controllers' files.
var errControllersOff = errors.New("the box's cgroup lacks the files of its controllers")

func (m *Manager) create(name string, l Limits) (*Box, error) {
	b := m.box(name)
	// On v1 the cpu hierarchy serves only the CPU limit (cpuacct
	// accounts): a box gets a directory there when it has a CPU limit,
	// or has no limits yet (built ahead, it may get one at its claim).
	b.withCPU = !m.mode.usesV1() || l.CPUs > 0 || l == (Limits{})
	if err := b.makeDirs(m); err != nil {
		b.Destroy()
		return nil, err
	}
	if l == (Limits{}) {
		b.limits = b.openLimitFiles()
		if !m.mode.usesV1() && errors.Is(b.limits.memory.err, fs.ErrNotExist) {
			b.Destroy()
			return nil, errControllersOff
		}
	} else if err := b.SetLimits(l); err != nil {
		b.Destroy()
		if !m.mode.usesV1() && errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %w", errControllersOff, err)
		}
		return nil, err
	}
	b.openAccounting()
	// The CPU limit needs cpuUsage from the start; the other files fail
	// (a kernel without them) only when read.
	if err := b.cpuUsage.err; err != nil {
		b.Destroy()
		return nil, err
	}
	return b, nil
}

// makeDirs makes the box's directories: one mkdir each when the parents
// are there and nothing is left of an earlier box of the name.
func (b *Box) makeDirs(m *Manager) error {
	for _, c := range b.controllers() {
		dir := b.dirs[c]
		for attempt := 1; ; attempt++ {
			err := unix.Mkdir(dir, 0o755)
			if err == nil {
				break
			}
			switch {
			case err == unix.EEXIST && attempt == 1:
				// Left by a supervisor that was killed.
				if err := removeDir(dir); err != nil {
					return fmt.Errorf("remove stale cgroup of %s: %w", b.name, err)
				}
				continue
			case err == unix.ENOENT && attempt < 3:
				// The parents are not made yet, or another box's
				// teardown removed them as it left them empty.
				if err := m.ensureParents(); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
	}
	// A box without a cpu directory must not find one of an earlier box
	// there.
	if !b.withCPU {
		if err := removeDir(b.dirs["cpu"]); err != nil {
			return fmt.Errorf("remove stale cgroup of %s: %w", b.name, err)
		}
	}
	return nil
}

// controllers are the keys of the box's own directories in dirs.
func (b *Box) controllers() []string {
	if !b.mode.usesV1() {
		return []string{""}
	}
	var cs []string
	for _, c := range v1Controllers {
		if c != "cpu" || b.withCPU {
			cs = append(cs, c)
		}
	}
	return cs
}

// openAccounting opens the files a run reads to account for what it used.
func (b *Box) openAccounting() {
	mem, pids := b.dirs[""], b.dirs[""]
	usage, peak, events := filepath.Join(mem, "cpu.stat"), "memory.peak", "memory.events"
	if b.mode.usesV1() {
		mem, pids = b.dirs["memory"], b.dirs["pids"]
		usage = filepath.Join(b.dirs["cpuacct"], "cpuacct.usage")
		peak, events = "memory.max_usage_in_bytes", "memory.oom_control"
	}
	b.cpuUsage = keepOpen(usage, unix.O_RDONLY)
	b.memoryPeak = keepOpen(filepath.Join(mem, peak), unix.O_RDONLY)
	b.oomEvents = keepOpen(filepath.Join(mem, events), unix.O_RDONLY)
	b.pidsPeak = keepOpen(filepath.Join(pids, "pids.peak"), unix.O_RDONLY)
}

// Remove deletes the cgroup of box name if it exists, killing what is left
// in it. It is for leftovers of a supervisor that was killed.
func (m *Manager) Remove(name string) error {
	return m.box(name).Destroy()
}

// box is the Box of name, nothing opened or created yet.
func (m *Manager) box(name string) *Box {
	b := &Box{mode: m.mode, name: name, dirs: map[string]string{}}
	for c, parent := range m.parents {
		b.dirs[c] = filepath.Join(parent, name)
	}
	return b
}

// Name is the box's cgroup name.
func (b *Box) Name() string { return b.name }

// Mode is the cgroup layout the box lives on.
func (b *Box) Mode() Mode { return b.mode }

// PlacementFiles opens the files by which the program enters the box
// before its first instruction, so that nothing else of the sandbox is in
// it. On v1: each controller's "tasks" file, opened for writing; the
// program writes "0" to each between fork and exec (v1 checks the
// opener's credentials, so a descriptor opened here by root works in the
// box's user namespace). On v2 (ForkInto): the cgroup's directory, into
// which the program is forked (clone3 with CLONE_INTO_CGROUP).
func (b *Box) PlacementFiles() ([]*os.File, error) {
	if b.ForkInto() {
		f, err := openCtl(b.dirs[""], unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return nil, err
		}
		return []*os.File{f.file()}, nil
	}
	var files []*os.File
	for _, c := range b.controllers() {
		f, err := openCtl(filepath.Join(b.dirs[c], "tasks"), unix.O_WRONLY)
		if err != nil {
			closeFiles(files)
			return nil, err
		}
		files = append(files, f.file())
	}
	return files, nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// ForkInto tells whether PlacementFiles is a directory to fork into (v2)
// rather than files to write (v1).
func (b *Box) ForkInto() bool { return !b.mode.usesV1() }

// CPUUsage is the CPU time used so far by every task in the box.
func (b *Box) CPUUsage() (time.Duration, error) {
	var buf [512]byte
	data, err := b.cpuUsage.read(buf[:])
	if err != nil {
		return 0, err
	}
	if b.mode.usesV1() {
		ns, err := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
		return time.Duration(ns), err
	}
	us, err := statField(data, "usage_usec")
	return time.Duration(us) * time.Microsecond, err
}

// SyncCPU makes the kernel charge the box's running threads for the CPU
// time they used since the last scheduler tick, so that CPUUsage is exact
// rather than up to a tick per CPU behind. Reading a process's CPU clock
// (clock_gettime of its CPUCLOCK_SCHED clock) updates the scheduler's
// accounting of its running threads, and with it the cgroup's.
func (b *Box) SyncCPU() {
	dir := b.dirs[""]
	if b.mode.usesV1() {
		dir = b.dirs["cpuacct"]
	}
	var ts unix.Timespec
	for _, pid := range procs(dir) {
		// A process's scheduler clock: ~pid << 3 | CPUCLOCK_SCHED.
		unix.ClockGettime(int32(^pid<<3|2), &ts)
	}
}

// CPUSplit is the user and system CPU time of the box, as the kernel
// split it.
func (b *Box) CPUSplit() (user, sys time.Duration, err error) {
	if b.mode.usesV1() {
		u, err1 := readInt(filepath.Join(b.dirs["cpuacct"], "cpuacct.usage_user"))
		s, err2 := readInt(filepath.Join(b.dirs["cpuacct"], "cpuacct.usage_sys"))
		return time.Duration(u), time.Duration(s), errors.Join(err1, err2)
	}
	data, err := readFile(filepath.Join(b.dirs[""], "cpu.stat"))
	if err != nil {
		return 0, 0, err
	}
	u, err1 := statField(data, "user_usec")
	s, err2 := statField(data, "system_usec")
	return time.Duration(u) * time.Microsecond, time.Duration(s) * time.Microsecond, errors.Join(err1, err2)
}

// MemoryPeak is the highest memory use of the box, in bytes.
func (b *Box) MemoryPeak() (int64, error) {
	var buf [64]byte
	return readValue(b.memoryPeak, buf[:])
}

// MemoryUsage is the box's charge now (page cache included) and how many
// file pages it has faulted back in since it started that it had itself
// evicted recently (the kernel's workingset refaults): together they tell
// a box that is stuck reclaiming its own code at the limit.
func (b *Box) MemoryUsage() (usage, refaults int64, err error) {
	dir, current := b.dirs[""], "memory.current"
	if b.mode.usesV1() {
		dir, current = b.dirs["memory"], "memory.usage_in_bytes"
	}
	if usage, err = readInt(filepath.Join(dir, current)); err != nil {
		return 0, 0, err
	}
	data, err := readFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0, 0, err
	}
	// Kernels before 5.9 count file and anon refaults together.
	if refaults, err = statField(data, "workingset_refault_file"); err != nil {
		refaults, err = statField(data, "workingset_refault")
	}
	return usage, refaults, err
}

// OOMKills is how many processes the kernel's OOM killer killed in the box.
func (b *Box) OOMKills() (int64, error) {
	var buf [512]byte
	data, err := b.oomEvents.read(buf[:])
	if err != nil {
		return 0, err
	}
	return statField(data, "oom_kill")
}

// PidsPeak is the highest number of tasks the box held at once.
func (b *Box) PidsPeak() (int64, error) {
	var buf [64]byte
	return readValue(b.pidsPeak, buf[:])
}

// Pids is how many tasks the box holds now.
func (b *Box) Pids() (int64, error) {
	dir := b.dirs[""]
	if b.mode.usesV1() {
		dir = b.dirs["pids"]
	}
	return readInt(filepath.Join(dir, "pids.current"))
}

// Destroy kills what is left in the box and removes its cgroup
// directories, then the parents ("isolate") if no other box is in them:
// nothing of isolate stays in the cgroup tree after its last box. Removing
// a directory the kernel still holds busy (a task is exiting) is retried
// for a while.
func (b *Box) Destroy() error {
	for _, f := range []*ctlFile{&b.cpuUsage, &b.memoryPeak, &b.oomEvents, &b.pidsPeak} {
		f.close()
	}
	if b.limits != nil {
		b.limits.close()
		b.limits = nil
	}
	err := b.removeDirs()
	for _, d := range b.dirs {
		// Fails while another box is in it (EBUSY), or when another
		// teardown was first (ENOENT): both fine.
		syscall.Rmdir(filepath.Dir(d))
	}
	return err
}

// removeDirs removes the box's own directories.
func (b *Box) removeDirs() error {
	var errs []error
	for _, d := range b.dirs {
		if err := removeDir(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeDir(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for wait := 50 * time.Microsecond; ; wait *= 2 {
		err := syscall.Rmdir(dir)
		if err == nil || err == syscall.ENOENT {
			return nil
		}
		if err != syscall.EBUSY || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		for _, pid := range procs(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if wait > 20*time.Millisecond {
			wait = 20 * time.Millisecond
		}
		time.Sleep(wait)
	}
}

// procs lists the pids in a cgroup directory.
func procs(dir string) []int {
	data, err := readFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func readInt(path string) (int64, error) {
	data, err := readFile(path)
	if err != nil {
		return 0, err
	}
	return parseInt(data)
}

// readValue reads the single value of kept-open file f.
func readValue(f ctlFile, buf []byte) (int64, error) {
	data, err := f.read(buf)
	if err != nil {
		return 0, err
	}
	return parseInt(data)
}

// parseInt parses a cgroup file's single value; "max" is -1.
func parseInt(data []byte) (int64, error) {
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// statField finds "key value" in a flat-keyed cgroup file.
func statField(data []byte, key string) (int64, error) {
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %q in cgroup file", key)
}

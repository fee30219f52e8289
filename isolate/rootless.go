package isolate

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// Without root (a user who is not root, no service): the box's user
// namespace is made by that user, so it maps one uid and one gid, the
// user's own, to the box user, or, where the user has subordinate ids,
// the user to the box's uid 0 and a subordinate id to the box user
// (rootless_subids.go); PID 1 holds every capability inside it and none outside. The box's cgroup goes in a cgroup v2 subtree
// delegated to the user; where there is none, the run goes on only if
// the caller allowed rlimits alone to enforce the limits, and the report
// says per limit how it was enforced.

// RootlessOptions are a run's settings that only a user who is not root
// gives.
type RootlessOptions struct {
	// CgroupRoot is a delegated cgroup v2 directory to put the boxes'
	// cgroups under; "": the cgroup this process runs in, if delegated.
	CgroupRoot string
	// AllowRlimitOnly lets a run go on with rlimits alone where no
	// delegated subtree exists (so does the configuration's
	// allow_rlimit_only).
	AllowRlimitOnly bool
}

// rootless is how a Host runs boxes for a user who is not root.
type rootless struct {
	uid, gid int
	// dir is the user's own directory for box locks (locks/) and the
	// staging mount point (root/).
	dir string
	// cg is the delegated subtree; cg.Dir "": rlimits only.
	cg cgroup.Delegation
	// sub, when set, is the user's subordinate ids: the box user is one
	// of them (rootless_subids.go).
	sub *subIDs
}

// NewRootlessHost prepares this machine for runs by the user this
// process runs as, who is not root (cfg nil: LoadConfig). With no
// delegated cgroup subtree and no AllowRlimitOnly it refuses, in one
// line that says why and how to get one.
func NewRootlessHost(cfg *Config, opt RootlessOptions) (*Host, error) {
	h, err := NewHost(cfg)
	if err != nil {
		return nil, err
	}
	r := &rootless{uid: os.Getuid(), gid: os.Getgid()}
	r.cg = cgroup.FindDelegated(opt.CgroupRoot)
	switch {
	case r.cg.Dir == "" && opt.CgroupRoot != "":
		return nil, usagef("--cgroup-root %s: %s", opt.CgroupRoot, r.cg.Why)
	case r.cg.Dir == "" && !opt.AllowRlimitOnly && !h.Config.AllowRlimitOnly:
		return nil, r.rlimitsRefused()
	}
	r.sub, _, _ = findSubIDs(h.Config, r.uid, r.gid)
	if r.dir, err = userRuntimeDir(r.uid); err != nil {
		return nil, err
	}
	h.rootless = r
	// The delegated subtree is made ready now, while this process is the
	// only one of the run in its cgroup: PrepareDelegated moves it out,
	// and the boxes' inits, its children, start in the leaf.
	if _, err := h.Cgroups(); err != nil {
		return nil, fmt.Errorf("delegated cgroup %s: %w", r.cg.Dir, err)
	}
	return h, nil
}

// cgroups is the cgroup manager of a user who is not root: nil
// (and no error) with rlimits alone.
func (r *rootless) cgroups() (*cgroup.Manager, error) {
	if r.cg.Dir == "" {
		return nil, nil
	}
	if err := cgroup.PrepareDelegated(r.cg); err != nil {
		return nil, err
	}
	return cgroup.NewManager(r.cg.Root)
}

// userRuntimeDir is the user's own directory for isolate's files that
// root keeps in /run/isolate: $XDG_RUNTIME_DIR/isolate, else
// $TMPDIR/isolate-UID, else, when another user made that one first (a
// shared /tmp is anyone's to squat), $HOME/.cache/isolate. It must be the
// user's alone (mode 0700): whoever could write there could hold the
// user's box ids or plant a link. The CLI finds a service of the user's
// own in the same place (cmd/isolate/handover.c, user_socket).
func userRuntimeDir(uid int) (string, error) {
	dir, _, err := runtimeDirOf(uid)
	if err != nil {
		return "", err
	}
	for _, d := range []string{dir, filepath.Join(dir, "locks"), filepath.Join(dir, "root")} {
		if err := unix.Mkdir(d, 0o700); err != nil && err != unix.EEXIST {
			return "", fmt.Errorf("create %s: %w", d, err)
		}
		if err := ownDir(d, uid); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// runtimeDirOf picks userRuntimeDir's directory; squatted says why
// $TMPDIR/isolate-UID was passed over ("": it was not).
func runtimeDirOf(uid int) (dir, squatted string, err error) {
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) && ownDir(x, uid) == nil {
		return filepath.Join(x, "isolate"), "", nil
	}
	tmp := filepath.Join(os.TempDir(), "isolate-"+strconv.Itoa(uid))
	var st unix.Stat_t
	if err := unix.Lstat(tmp, &st); err != nil || ownDir(tmp, uid) == nil {
		return tmp, "", nil // missing (made next), or the user's own
	}
	squatted = fmt.Sprintf("%s is not a directory of uid %d's alone (uid %d's, mode %04o): another user made it", tmp, uid, st.Uid, st.Mode&0o7777)
	home := os.Getenv("HOME")
	var hs unix.Stat_t
	if !filepath.IsAbs(home) || unix.Stat(home, &hs) != nil || int(hs.Uid) != uid || hs.Mode&0o022 != 0 {
		return "", squatted, fmt.Errorf("%s, and $HOME is not a directory of yours that only you may write to: remove it (root may), or set XDG_RUNTIME_DIR or TMPDIR to a directory of your own", squatted)
	}
	cache := filepath.Join(home, ".cache")
	if err := unix.Mkdir(cache, 0o700); err != nil && err != unix.EEXIST {
		return "", squatted, fmt.Errorf("%s; create %s: %w", squatted, cache, err)
	}
	return filepath.Join(cache, "isolate"), squatted, nil
}

// RuntimeDirNote says why UserRuntimeDir is not where a user would look
// first ("": it is): $TMPDIR/isolate-UID is another user's.
func RuntimeDirNote() string {
	_, why, _ := runtimeDirOf(os.Getuid())
	return why
}

// UserRuntimeDir is userRuntimeDir of the user this process runs as, who
// is not root: where a service of the user's own keeps its sockets and
// files (made if missing).
func UserRuntimeDir() (string, error) { return userRuntimeDir(os.Getuid()) }

// ownDir checks that dir is a directory (not a link) of uid's alone.
func ownDir(dir string, uid int) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid || st.Mode&0o077 != 0 {
		return fmt.Errorf("%s is not a directory of uid %d's alone (mode 0700)", dir, uid)
	}
	return nil
}

// rlimitsRefused is the refusal of a run that did not allow rlimits
// alone where no delegated subtree exists.
func (r *rootless) rlimitsRefused() error {
	return usagef("not root, and no cgroup v2 subtree is delegated to you to enforce the limits (%s): "+
		"run under one (`%s`), or pass --allow-rlimit-only (allow_rlimit_only = 1 in the configuration) "+
		"to enforce them with rlimits alone", r.cg.Why, cgroup.DelegateHint)
}

// Rootless tells whether the host runs boxes without root.
func (h *Host) Rootless() bool { return h.rootless != nil }

// CheckRlimitsAllowed refuses, on a host without root that enforces the
// limits with rlimits alone (a service of a user's own started with
// --allow-rlimit-only), a run that did not allow that itself, with the
// words a run in-process would get: never a silent downgrade.
func (h *Host) CheckRlimitsAllowed(allowed bool) error {
	if !h.rlimitsOnly() || allowed || h.Config.AllowRlimitOnly {
		return nil
	}
	return h.rootless.rlimitsRefused()
}

// rlimitsOnly: the host enforces the limits with rlimits alone.
func (h *Host) rlimitsOnly() bool { return h.rootless != nil && h.rootless.cg.Dir == "" }

func (h *Host) lockDir() string {
	if h.rootless != nil {
		return filepath.Join(h.rootless.dir, "locks")
	}
	return LockDir
}

// stagingDir is where init mounts the box's root: "" is
// rootfs.StagingDir.
func (h *Host) stagingDir() string {
	if h.rootless != nil {
		return filepath.Join(h.rootless.dir, "root")
	}
	return ""
}

// appendInitMaps appends init's ID map arguments to argv: root maps
// itself and the box's own host uid; a user who is not root can map only
// itself, to the box user, and its gid alone (init then denies
// setgroups); with subordinate ids, itself to uid 0 and the box's
// subordinate id to the box user, which init has newuidmap and newgidmap
// write.
func (s *supervisor) appendInitMaps(argv []string) []string {
	r := s.host.rootless
	if r == nil {
		return append(argv, idMaps(FirstUID+s.lock.id))
	}
	if sub := s.subIDs(); sub != nil {
		s.hostUID, s.hostGID = sub.uid.of(s.lock.id), sub.gid.of(s.lock.id)
		return append(argv, fmt.Sprintf("0 %d 1\n%d %d 1\n", r.uid, boxUID, s.hostUID),
			fmt.Sprintf("0 %d 1\n%d %d 1\n", r.gid, boxUID, s.hostGID), sub.newuidmap, sub.newgidmap)
	}
	s.hostUID, s.hostGID = r.uid, r.gid
	return append(argv, fmt.Sprintf("%d %d 1\n", boxUID, r.uid), fmt.Sprintf("%d %d 1\n", boxUID, r.gid))
}

// boxCred is whose rights box files are handled with on the host: the
// box's own uid, or, without root, the user's (the box user is the user,
// or a subordinate id that hands the box's directories to the user, its
// uid 0, while the supervisor handles them).
func (s *supervisor) boxCred() Cred {
	if s.host.rootless != nil {
		return hostfs.OwnCred()
	}
	return boxCred(s.lock.id)
}

// checkWithoutRoot refuses what a run without root cannot do: a
// squashfs image (mounted on a loop device), and, with rlimits alone, a
// CPU bandwidth limit.
func (h *Host) checkWithoutRoot(sp *Spec) error {
	switch {
	case h.rootless == nil:
	case sp.ImageFile != "" && sp.ImageMount == nil:
		return usagef("--image %s: a squashfs file is mounted on a loop device, which needs root: unpack it (unsquashfs) and give the directory", sp.ImageFile)
	case h.rlimitsOnly() && sp.CPUs > 0:
		return usagef("--cpus %g: CPU bandwidth needs a cgroup; with rlimits alone it cannot be limited", sp.CPUs)
	}
	return nil
}

// rlimitsForCgroup sets, with rlimits alone, the rlimits that stand in for
// the box's cgroup limits (set after the others: they replace RLIMIT_CPU's
// backstop and a smaller RLIMIT_AS).
//   - memory: RLIMIT_AS, the address space of each process (not the pages
//     in use, not the page cache or tmpfs): a program over it fails to
//     allocate (RE or SG), the kernel's OOM killer never acts (no ML).
//   - pids: RLIMIT_NPROC, which the kernel (5.14 and later) counts per
//     user namespace and uid: the box's own tasks, PID 1 among them
//     unless the box user is a subordinate id (PID 1 is then uid 0).
//   - cpu: RLIMIT_CPU, of each process, in whole seconds, rounded up.
//
// A language whose runtime reserves far more address space than it uses
// (Go, V8, the JVM) has its own rule (MemoryRlimit): RLIMIT_DATA, which
// counts the private writable memory a process maps (heap, brk, stacks of
// threads) and not reservations without access, or none at all; and a
// factor (MemoryRlimitFactor) for memory mapped whole but little touched
// (the JVM's thread stacks).
func (s *supervisor) rlimitsForCgroup(rl func(res int, v int64)) {
	sp := s.spec
	if mem := sp.Memory; mem > 0 {
		if f := sp.MemoryRlimitFactor; f > 1 && float64(mem)*f < math.MaxInt64/2 {
			mem = int64(float64(mem) * f)
		}
		switch sp.MemoryRlimit {
		case MemoryRlimitData:
			rl(unix.RLIMIT_DATA, mem)
		case MemoryRlimitNone:
		default:
			if sp.AddrSpace > 0 && sp.AddrSpace < mem {
				mem = sp.AddrSpace
			}
			rl(unix.RLIMIT_AS, mem)
		}
	}
	if sp.Pids > 0 {
		n := sp.Pids + 1
		if s.host != nil && s.subIDs() != nil {
			n = sp.Pids
		}
		rl(unix.RLIMIT_NPROC, n)
	}
	if sp.CPUTime > 0 {
		rl(unix.RLIMIT_CPU, int64((sp.CPUTime+sp.ExtraTime+time.Second-1)/time.Second))
	}
}

// How memory is bounded with rlimits alone (Spec.MemoryRlimit, a
// language's rlimit_memory), in the report's sandbox.limits.memory_rlimit.
const (
	MemoryRlimitAS   = "address-space" // RLIMIT_AS: every mapping counts
	MemoryRlimitData = "data"          // RLIMIT_DATA: private writable memory
	MemoryRlimitNone = "none"          // not bounded
)

// Ways a limit is enforced, in the report's sandbox.limits.
const (
	enforcedCgroup     = "cgroup"
	enforcedRlimit     = "rlimit"
	enforcedSupervisor = "supervisor"
	enforcedNone       = "none" // no limit asked
)

// enforcement says per limit how a run without root enforces it; nil for
// root, whose limits are always the cgroup's.
func (h *Host) enforcement(sp *Spec) map[string]string {
	if h.rootless == nil {
		return nil
	}
	by := enforcedCgroup
	if h.rlimitsOnly() {
		by = enforcedRlimit
	}
	how := func(set bool, way string) string {
		if set {
			return way
		}
		return enforcedNone
	}
	limits := map[string]string{
		"memory": how(sp.Memory > 0, by),
		"pids":   how(sp.Pids > 0, by),
		"cpu":    how(sp.CPUTime > 0, by),
		"cpus":   how(sp.CPUs > 0, enforcedCgroup),
		"wall":   enforcedSupervisor,
	}
	if h.rlimitsOnly() && sp.Memory > 0 {
		rule := sp.MemoryRlimit
		if rule == "" {
			rule = MemoryRlimitAS
		}
		if rule == MemoryRlimitNone {
			limits["memory"] = enforcedNone
		}
		limits["memory_rlimit"] = rule
	}
	return limits
}

// Who the box user is on the host, in the report's sandbox.user (runs
// without root alone).
const (
	boxUserCaller      = "caller"      // the caller's own uid and gid
	boxUserSubordinate = "subordinate" // a subordinate uid and gid of the caller's
)

func (s *supervisor) boxUser() string {
	switch {
	case s.host.rootless == nil:
		return ""
	case s.subIDs() != nil:
		return boxUserSubordinate
	}
	return boxUserCaller
}

// noCgroupUsage accounts a run without a cgroup from init's rusage of
// every process it reaped (the program's and what it left): CPU time
// exact to the microsecond; no memory peak, OOM kill or pids peak can be
// known (they stay 0).
func noCgroupUsage(m *boxinit.Message) (total, user, sys time.Duration) {
	user, sys = time.Duration(m.UserNs), time.Duration(m.SysNs)
	return user + sys, user, sys
}

// RootlessBoxDir makes the /box that exec's phases share, for a user who
// cannot mount a tmpfs on the host: a directory of the user's runtime
// directory (size, uid and gid are the tmpfs's, and do not apply: the
// box user is the user, or a subordinate id to which each phase's PID 1
// hands the directory and from which it takes it back; files are bounded
// by RLIMIT_FSIZE alone). It is
// removed at Close. A directory whose exec was killed before it could
// remove it is removed by the next: each is flocked while in use.
func (h *Host) RootlessBoxDir(_ int64, _, _ int, mode os.FileMode) (*rootfs.Mounted, error) {
	parent := filepath.Join(h.rootless.dir, "boxes")
	if err := unix.Mkdir(parent, 0o700); err != nil && err != unix.EEXIST {
		return nil, fmt.Errorf("create %s: %w", parent, err)
	}
	if err := ownDir(parent, h.rootless.uid); err != nil {
		return nil, err
	}
	sweepBoxDirs(parent)
	dir, err := os.MkdirTemp(parent, "exec-")
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		os.RemoveAll(dir)
		return nil, err
	}
	return rootfs.HeldDir(dir, f, func() { os.RemoveAll(dir) }), nil
}

// sweepBoxDirs removes the box directories in parent that no exec holds.
func sweepBoxDirs(parent string) {
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		dir := filepath.Join(parent, e.Name())
		f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			os.RemoveAll(dir)
		}
		f.Close()
	}
}

package isolate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/isolate/egress"
	"github.com/isolate-sandbox/isolate/langs"
	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/seccomp"
)

// Host is this machine prepared for runs, built once per process: its
// configuration (file and environment, resolved in LoadConfig), the
// cgroup manager (found on the first run, then reused) and the compiled
// syscall policies. Front ends (the CLI's commands, the service) fill an
// api.Spec and call Run; a Host serves any number of runs at once.
type Host struct {
	Config *Config

	cgOnce sync.Once
	cg     *cgroup.Manager
	cgErr  error
	// claims is the claims file of cg's root (cgroup_claims.go).
	claims atomic.Pointer[os.File]

	mu       sync.Mutex
	policies map[policyKey]*seccomp.Program

	// pool holds boxes built ahead (pool.go); nil: none.
	pool atomic.Pointer[pool]

	lastSweep atomic.Int64 // UnixNano of the last sweep (host_sweep.go)

	// rootless: the boxes are a user's who is not root (rootless.go).
	rootless *rootless
}

// NewHost prepares the host with cfg; nil reads the configuration
// (LoadConfig).
func NewHost(cfg *Config) (*Host, error) {
	if cfg == nil {
		var err error
		if cfg, err = LoadConfig(); err != nil {
			return nil, err
		}
	}
	return &Host{Config: cfg, policies: map[policyKey]*seccomp.Program{}}, nil
}

// Cgroups is the host's cgroup manager, found once.
func (h *Host) Cgroups() (*cgroup.Manager, error) {
	h.cgOnce.Do(func() {
		if h.rootless != nil {
			h.cg, h.cgErr = h.rootless.cgroups()
			return
		}
		h.cg, h.cgErr = cgroup.NewManager(h.Config.CgroupRoot)
	})
	return h.cg, h.cgErr
}

// PrepareCgroups readies the host's cgroups for boxes at once (a service
// at its start): in a container's cgroup namespace on cgroup v2, the
// process moves itself into a leaf of the container's cgroup and enables
// the box controllers there (cgroup.Manager.Prepare).
func (h *Host) PrepareCgroups() error {
	m, err := h.Cgroups()
	if err != nil || m == nil {
		return err
	}
	return m.Prepare()
}

// policyKey names a compiled policy: a built-in one by name, a profile
// file by name and the version of the file it was compiled from.
type policyKey struct {
	name          string
	dev, ino      uint64
	size, modTime int64
	quiet         bool // without its listener (Spec.NoSyscallReport)
}

// policy compiles the named syscall policy (quiet: without a listener),
// or takes it from the cache.
func (h *Host) policy(name string, quiet bool) (*seccomp.Program, error) {
	key := policyKey{name: name, quiet: quiet}
	if name != "default" && name != "none" {
		fi, err := os.Stat(name)
		if err != nil {
			return nil, err
		}
		key.size, key.modTime = fi.Size(), fi.ModTime().UnixNano()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			key.dev, key.ino = st.Dev, st.Ino
		}
	}
	h.mu.Lock()
	p, ok := h.policies[key]
	h.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := seccomp.Compile(name)
	if err != nil {
		return nil, err
	}
	if quiet {
		p = p.WithoutNotify()
	}
	h.mu.Lock()
	h.policies[key] = p
	h.mu.Unlock()
	return p, nil
}

// IO are a run's standard streams, under os/exec's rule. Stdin nil is
// /dev/null; an *os.File is given to the program as is; any other Reader
// is copied into a pipe (Run does not wait for that copy: a Reader that
// blocks is the caller's to unblock). Stdout or Stderr nil is captured
// into the report (up to output_limit_bytes); an *os.File is given to the
// program as is and not captured; any other Writer is captured and also
// gets the output live, as it arrives.
type IO struct {
	Stdin          interface{ Read([]byte) (int, error) }
	Stdout, Stderr interface{ Write([]byte) (int, error) }
	// CopyIn and CopyOut are files given and taken as data (Copy's
	// Content and Sink), after the spec's own copies: a front end's
	// inline content or its own files, never a path on the host.
	CopyIn, CopyOut []Copy
	// BeforeStart, if set, is called once the box is built, right before
	// its program starts: what a front end needs in place while the
	// program runs, made as it starts rather than before (the CLI's
	// catching of signals that only faults of its own would send it).
	BeforeStart func()
}

// Prepared is a checked and resolved run: nothing exists for it yet.
type Prepared struct {
	h      *Host
	spec   *Spec
	policy *seccomp.Program
	// persistent: a box id names a persistent box if `isolate init` made
	// it (a request's box_id). A runtime-level spec says BoxDir itself.
	persistent bool
	checkTook  time.Duration // the "validate" stage of the report's timers
	// ownTree: the image tree was opened by Prepare, and Run closes it.
	ownTree bool
}

// Run performs one sandboxed run of spec: check and resolve it (bad input
// is a *api.FieldError or *api.UsageError, and nothing is created), then
// Prepared.Run.
func (h *Host) Run(ctx context.Context, spec *api.Spec, stdio IO) (*api.Report, error) {
	p, err := h.Prepare(spec)
	if err != nil {
		return nil, err
	}
	return p.Run(ctx, stdio)
}

// Prepare checks spec and resolves it against the host (image, language,
// syscall policy, defaults). It creates nothing, so a front end can open
// the run's host files after it.
func (h *Host) Prepare(spec *api.Spec) (*Prepared, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	rs, err := h.Resolve(spec)
	if err != nil {
		return nil, err
	}
	p, err := h.PrepareSpec(rs)
	if err != nil {
		rs.ImageTree.Close()
		return nil, err
	}
	p.persistent, p.ownTree = true, true
	return p, nil
}

// PrepareSpec checks a runtime-level spec (for front ends that need what
// a request cannot say, like the ioi form's directory rules).
func (h *Host) PrepareSpec(spec *Spec) (*Prepared, error) {
	start := time.Now()
	p := &Prepared{h: h, spec: spec}
	if err := p.check(); err != nil {
		return nil, err
	}
	p.checkTook = time.Since(start)
	return p, nil
}

// Run runs the prepared spec: hold the box (for a request, a persistent
// one if `isolate init` made it), build it, start and supervise the program, account,
// tear down. A failure of the sandbox is a report with status XX whose
// Message says why. Cancelling ctx kills the program; the report is then
// XX, "interrupted: " and context.Cause.
func (p *Prepared) Run(ctx context.Context, stdio IO) (*api.Report, error) {
	defer p.Close()
	finish := func() error { return nil }
	// (Persistent boxes are root's: a box id without root is the user's.)
	if p.persistent && p.h.rootless == nil {
		var err error
		if finish, err = UsePersistent(p.spec, p.h.Config); err != nil {
			return nil, err
		}
	}
	rep := run(ctx, p, stdio)
	if ferr := finish(); ferr != nil && rep.Status != StatusXX {
		rep.Status, rep.Message = StatusXX, "hand the box back: "+ferr.Error()
	}
	return rep, nil
}

// Close releases what Prepare holds (a built image's tree) for a run that
// will not happen; Run releases it itself.
func (p *Prepared) Close() {
	if p.ownTree {
		p.ownTree = false
		p.spec.ImageTree.Close()
	}
}

// Resolve turns a checked request into the runtime's spec: defaults,
// language, image, environment. A built image's tree is held in the
// spec's ImageTree: the caller closes it once done with the spec.
func (h *Host) Resolve(a *api.Spec) (*Spec, error) {
	s := Defaults()
	s.Command = append([]string(nil), a.Args...)
	if a.BoxID != nil {
		s.BoxID = *a.BoxID
	}
	var lang *langs.Lang
	if a.Lang != "" {
		l, err := langs.Find(a.Lang)
		if err != nil {
			return nil, &api.FieldError{Field: "lang", Msg: err.Error()}
		}
		lang = l
	}
	image := a.Image
	if image == "" && lang != nil {
		image = lang.Image
	}
	if err := resolveImage(&s, image); err != nil {
		return nil, err
	}
	env := BaseEnv
	if lang != nil {
		env = MergeEnv(env, lang.Env)
		s.MemoryRlimit, s.MemoryRlimitFactor = lang.RlimitMemory, lang.RlimitMemoryFactor
	}
	if a.Network != nil {
		env = MergeEnv(env, egress.Env())
	}
	s.Env = MergeEnv(env, a.Env)
	s.CPUTime = duration(a.CPUTimeMs, 0)
	s.WallTime = duration(a.WallTimeMs, time.Duration(math.MaxInt64))
	s.ExtraTime = duration(a.ExtraTimeMs, 0)
	limit(&s.Memory, a.MemoryBytes)
	limit(&s.AddrSpace, a.AddressSpaceBytes)
	limit(&s.Pids, a.Pids)
	limit(&s.FileSize, a.FileSizeBytes)
	limit(&s.TmpSize, a.TmpSizeBytes)
	limit(&s.OpenFiles, a.OpenFiles)
	if max := openFilesMax(); s.OpenFiles > max {
		return nil, &api.FieldError{Field: "open_files", Msg: fmt.Sprintf("%d is beyond %d, the hard limit of open files this sandbox's processes inherit (ulimit -Hn)", s.OpenFiles, max)}
	}
	limit(&s.Stack, a.StackBytes)
	limit(&s.OutputLimit, a.OutputLimitBytes)
	if a.CPUs > 0 {
		s.CPUs = a.CPUs
	}
	for _, b := range a.Binds {
		s.Binds = append(s.Binds, Bind{Host: b.Host, Box: b.Box, Writable: b.Writable})
	}
	for _, c := range a.CopyIn {
		s.CopyIn = append(s.CopyIn, Copy{From: c.From, To: c.To})
	}
	for _, c := range a.CopyOut {
		s.CopyOut = append(s.CopyOut, Copy{From: c.From, To: c.To})
	}
	s.HostNet = a.Net == "host"
	if a.Network != nil {
		// (Validate checked the lists.)
		pol, err := egress.Parse("network", a.Network.Allow, a.Network.Deny)
		if err != nil {
			return nil, err
		}
		s.Egress = pol
	}
	s.StderrToStdout = a.StderrToStdout
	if a.Cwd != "" {
		s.Chdir = a.Cwd
	}
	if a.Seccomp != "" {
		s.Seccomp = a.Seccomp
	}
	return &s, nil
}

// duration is a time limit of a request: 0 keeps the runtime's default
// (0), Unlimited gives none.
func duration(ms int64, none time.Duration) time.Duration {
	switch ms {
	case 0:
		return 0
	case api.Unlimited:
		return none
	}
	return time.Duration(ms) * time.Millisecond
}

// limit applies a limit of a request to the runtime's (where 0 is none):
// 0 keeps the default, Unlimited turns it off.
func limit(dst *int64, v int64) {
	switch v {
	case 0:
	case api.Unlimited:
		*dst = 0
	default:
		*dst = v
	}
}

// resolveImage maps an image setting to what the box's system tree comes
// from: "host", a built image's name (its unpacked tree, held in
// s.ImageTree until the caller closes it), a directory, or a squashfs
// file (mounted for each run: the slow path).
func resolveImage(s *Spec, name string) error {
	s.Image, s.ImageDir, s.ImageFile = name, "", ""
	bad := func(format string, a ...any) error {
		return &api.FieldError{Field: "image", Msg: fmt.Sprintf(format, a...)}
	}
	switch {
	case name == "" || name == "host":
		s.Image, s.ImageDir = "host", "/"
	case strings.Contains(name, "/"):
		fi, err := os.Stat(name)
		if err != nil {
			return bad("%s: %v", name, errors.Unwrap(err))
		}
		if fi.IsDir() {
			s.ImageDir = name
		} else if rootfs.IsSquashfs(name) {
			s.ImageFile = name
		} else {
			return bad("%s: neither a directory nor a squashfs file", name)
		}
	default:
		// The image's tree, held until the run is over: a rebuild or rm
		// does not change it under the box.
		t, err := rootfs.OpenTree(name)
		if err != nil {
			return bad("%s: %v", name, err)
		}
		s.ImageDir, s.ImageTree = t.Dir, t
	}
	return nil
}

// MergeEnv is base with each NAME=VALUE of sets applied in order: a name
// already there is replaced in place, a new one appended.
func MergeEnv(base []string, sets ...[]string) []string {
	env := append([]string(nil), base...)
	for _, set := range sets {
		for _, kv := range set {
			name, _, _ := strings.Cut(kv, "=")
			replaced := false
			for i, e := range env {
				if strings.HasPrefix(e, name+"=") {
					env[i], replaced = kv, true
				}
			}
			if !replaced {
				env = append(env, kv)
			}
		}
	}
	return env
}

// openFilesMax is the most open_files a box may have: the box's processes
// inherit this process's hard limit and may not raise it.
func openFilesMax() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Max > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(rl.Max)
}

package isolate

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
	"github.com/isolate-sandbox/isolate/seccomp"
)

func (h *Host) numBoxes() int {
	if h.Config.NumBoxes > 0 {
		return h.Config.NumBoxes
	}
	return DefaultNumBoxes
}

func policyName(sp *Spec) string {
	if sp.Seccomp == "" {
		return "default"
	}
	return sp.Seccomp
}

// check checks the input against the host before anything is created,
// and compiles the syscall policy.
func (p *Prepared) check() error {
	sp := p.spec
	if len(sp.Command) == 0 || sp.Command[0] == "" {
		return usagef("no command given (isolate run [options] -- COMMAND [ARG...])")
	}
	if n := p.h.numBoxes(); sp.BoxID >= n {
		file := p.h.Config.Path
		if file == "" {
			file = ConfigPath
		}
		return fieldf("box_id", "%d is out of range (0-%d; num_boxes in %s raises it)", sp.BoxID, n-1, file)
	}
	if sp.ImageDir == "" && sp.ImageFile == "" && sp.ImageMount == nil {
		return fieldf("image", "%q: unknown image", sp.Image)
	}
	if sp.Chdir != "" && sp.Chdir[0] != '/' {
		return fieldf("cwd", "%q: must be an absolute path inside the box", sp.Chdir)
	}
	for i, b := range sp.Binds {
		if _, err := os.Stat(b.Host); err != nil {
			return fieldf(fmt.Sprintf("binds[%d].host", i), "%s: %v", b.Host, errors.Unwrap(err))
		}
		if b.Box == "" || b.Box[0] != '/' || hostfs.BoxPath(b.Box) == "/" {
			return fieldf(fmt.Sprintf("binds[%d].box", i), "%s:%s: the box path must be absolute and not /", b.Host, b.Box)
		}
	}
	for i, c := range sp.CopyIn {
		if _, err := os.Stat(c.From); err != nil {
			return fieldf(fmt.Sprintf("copy_in[%d].from", i), "%s: %v", c.From, errors.Unwrap(err))
		}
	}
	for i, c := range sp.CopyOut {
		if _, err := os.Stat(hostfs.DirOf(c.To)); err != nil {
			return fieldf(fmt.Sprintf("copy_out[%d].to", i), "%s: directory %s does not exist", c.To, hostfs.DirOf(c.To))
		}
	}
	policy, err := p.h.policy(policyName(sp), sp.NoSyscallReport)
	if err != nil {
		var pe *seccomp.ProfileError
		if errors.As(err, &pe) || os.IsNotExist(err) {
			return fieldf("seccomp", "%v", err)
		}
		return fmt.Errorf("compile seccomp policy: %w", err)
	}
	p.policy = policy
	return p.h.checkWithoutRoot(sp)
}

// caller is whose rights the run's host paths are opened with.
func (s *supervisor) caller() Cred { return hostfs.CredOf(s.spec.Caller) }

// openCopyDst opens the --copy-out destinations' directories with the
// caller's rights, before the program starts (it may replace them later).
func (s *supervisor) openCopyDst() error {
	return hostfs.WithFSThread(func(t *hostfs.FSThread) error {
		for _, c := range s.spec.CopyOut {
			if c.Sink != nil {
				s.copyDst = append(s.copyDst, nil) // (taken as data)
				continue
			}
			h, err := hostfs.OpenHostPath(t, s.caller(), c.To)
			if err != nil {
				return fmt.Errorf("--copy-out %w", err) // err names the path
			}
			s.copyDst = append(s.copyDst, h)
		}
		return nil
	})
}

func (s *supervisor) closeCopyDst() {
	for _, h := range s.copyDst {
		if h != nil {
			h.Close()
		}
	}
	s.copyDst = nil
}

// lockBox takes a box id.
func (s *supervisor) lockBox() error {
	var err error
	first, n := s.host.Config.AutoBoxes()
	// Persistent boxes have ids below MaxBoxes: an automatic range above
	// them (the default) need not look for one on each candidate.
	var persistent func(int) bool
	if first < MaxBoxes {
		persistent = persistentIn(s.host.Config.BoxRoot)
	}
	if s.lock, err = lockBox(s.host.lockDir(), s.spec.BoxID, first, n, persistent); err != nil {
		return err
	}
	s.report.BoxID = s.lock.id
	s.timer.mark("lock")
	return nil
}

// cgroupResult is what createCgroup's goroutine made.
type cgroupResult struct {
	mode      cgroup.Mode
	box       *boxCgroup
	placement []*os.File
	took      time.Duration
	err       error
}

// createCgroup creates the box's cgroup and opens the files through which
// the program joins it, in a goroutine: see awaitCgroup.
func (s *supervisor) createCgroup() {
	done := make(chan cgroupResult, 1)
	s.cgroupDone = done
	create := s.cgroupCreator()
	go func() { done <- create() }()
}

// createCgroupNow is createCgroup and awaitCgroup for a run with nothing
// to do meanwhile (one claiming a box built ahead for its box id): in
// this goroutine, with no other to start and wake.
func (s *supervisor) createCgroupNow() error {
	return s.takeCgroup(s.cgroupCreator()())
}

// cgroupCreator is what creates the box's cgroup (it reads nothing of
// s's when called).
func (s *supervisor) cgroupCreator() func() cgroupResult {
	id, host := s.lock.id, s.host
	limits := s.limits()
	if s.ahead {
		limits = cgroup.Limits{} // the command's, set when it claims the box
	}
	// A one-shot run of a box id its caller chose (a judge's --run of its
	// box) lists no other box's cgroups: its own stale one goes when it
	// is made (cgroup.Create). A run that picks a free id sweeps, and so
	// does a service, whatever it runs.
	sweeps := s.spec.BoxID < 0 || host.pool.Load() != nil
	return func() (r cgroupResult) {
		start := time.Now()
		defer func() { r.took = time.Since(start) }()
		mgr, err := host.Cgroups()
		if err != nil {
			r.err = fmt.Errorf("cgroups: %w", err)
			return r
		}
		if mgr == nil { // rlimits alone (rootless.go)
			r.mode = "none"
			return r
		}
		r.mode = mgr.Mode()
		if sweeps && host.sweepDue(start) {
			sweepStale(mgr, host.lockDir(), id)
		}
		if r.box, r.err = host.createBoxCgroup(mgr, id, limits); r.err != nil {
			return r
		}
		if r.placement, err = r.box.PlacementFiles(); err != nil {
			r.err = fmt.Errorf("open cgroup placement files: %w", err)
		}
		return r
	}
}

// limits are the run's cgroup limits.
func (s *supervisor) limits() cgroup.Limits {
	return cgroup.Limits{Memory: s.spec.Memory, Pids: s.spec.Pids, CPUs: s.spec.CPUs}
}

// awaitCgroup takes what createCgroup made (once; later calls return
// nil). Teardown removes it, whatever else failed.
func (s *supervisor) awaitCgroup() error {
	if s.cgroupDone == nil {
		return nil
	}
	r := <-s.cgroupDone
	s.cgroupDone = nil
	return s.takeCgroup(r)
}

// takeCgroup takes the cgroup r made into the run.
func (s *supervisor) takeCgroup(r cgroupResult) error {
	s.timer.mark("cgroup-wait")
	s.timer.stages["cgroup"] = r.took.Seconds()
	s.report.Sandbox.Cgroup = string(r.mode)
	s.cg, s.placement = r.box, r.placement
	return r.err
}

package isolate

import (
	"strings"
	"syscall"
	"time"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// account fills the report from the kernel's figures: the cgroup for CPU,
// memory and tasks, init's wait4 for the exit and rusage.
func (s *supervisor) account(m *boxinit.Message, wall time.Duration) error {
	r := s.report
	sp := s.spec
	ws := syscall.WaitStatus(m.WaitStatus)
	r.WallTime = wall.Seconds()
	r.MaxRSS = m.MaxRSS * 1024
	r.CSWVoluntary = m.NVCSW
	r.CSWInvoluntary = m.NIVCSW
	if m.ExecErr != "" {
		r.Message = m.ExecErr
		r.StartFailure = startFailure(sp.Command[0], m)
	}
	var total, user, sys time.Duration
	var err error
	if s.cg == nil {
		total, user, sys = noCgroupUsage(m)
	} else if total, user, sys, err = s.cgroupUsage(m); err != nil {
		return err
	}
	if user+sys > 0 {
		r.UserTime = (time.Duration(float64(total) * float64(user) / float64(user+sys))).Seconds()
	}
	r.CPUTime = total.Seconds()
	r.SysTime = r.CPUTime - r.UserTime
	v := verdict(verdictInput{
		Wait:         ws,
		ExecErr:      m.ExecErr,
		StartFailure: r.StartFailure,
		CPU:          total,
		CPULimit:     sp.CPUTime,
		ExtraTime:    sp.ExtraTime,
		Killed:       r.Killed,
		KillLimit:    r.Limit,
		OOMKilled:    r.OOMKilled,
		NoCgroup:     s.cg == nil,
		RlimitCPU:    s.cg == nil && s.host.rlimitsOnly(),
	})
	r.Status, r.Limit, r.Message, r.Cause = v.Status, v.Limit, v.Message, v.Cause
	r.ExitCode, r.Signal = v.ExitCode, v.Signal
	return nil
}

// cgroupUsage reads what the box used from its cgroup into the report:
// CPU time (the total, and the user/system split to apply to it),
// memory peak, OOM kills, pids peak.
func (s *supervisor) cgroupUsage(m *boxinit.Message) (total, user, sys time.Duration, err error) {
	r := s.report
	if total, err = s.cg.CPUUsage(); err != nil {
		return 0, 0, 0, cgroupReadErr("read CPU usage", err)
	}
	// The cgroup's total is exact; the kernel's user/system split comes
	// from the rusage of every process PID 1 reaped (the program's and
	// what it left), else from the cgroup.
	user, sys = time.Duration(m.UserNs), time.Duration(m.SysNs)
	if user+sys == 0 {
		user, sys, _ = s.cg.CPUSplit()
	}
	if r.MemoryPeak, err = s.cg.MemoryPeak(); err != nil {
		return 0, 0, 0, cgroupReadErr("read memory peak", err)
	}
	ooms, err := s.cg.OOMKills()
	if err != nil {
		return 0, 0, 0, cgroupReadErr("read OOM kills", err)
	}
	r.OOMKilled = ooms > 0
	if r.PidsPeak, err = s.cg.PidsPeak(); err != nil {
		return 0, 0, 0, cgroupReadErr("read pids peak", err)
	}
	return total, user, sys, nil
}

// startFailure is the step that kept the program from starting, as init
// sent it: the step ("execve" for the program's own exec), its errno, and
// the text after "PROGRAM: " or "STEP: ".
func startFailure(program string, m *boxinit.Message) *StepError {
	prefix := m.Step + ": "
	if m.Step == "execve" {
		prefix = program + ": "
	}
	return &StepError{Step: m.Step, Errno: m.Errno, Msg: strings.TrimPrefix(m.ExecErr, prefix)}
}

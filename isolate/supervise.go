package isolate

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// supervise enforces the CPU and wall limits until the program is done,
// then collects what it used.
func (s *supervisor) supervise() error {
	sp := s.spec
	// The limits count from the execve, which init tells late.
	start := s.execAt
	wall := time.NewTimer(sp.effectiveWall() - time.Since(start))
	defer wall.Stop()
	var cpuCheck <-chan time.Time
	cpuBudget := sp.CPUTime + sp.ExtraTime
	cpus := s.cpusUsable()
	var cpuTimer *time.Timer
	// (Without a cgroup, RLIMIT_CPU alone: rootless.go.)
	if sp.CPUTime > 0 && s.cg != nil {
		cpuTimer = time.NewTimer(s.cpuTimeToLimit() - time.Since(start))
		defer cpuTimer.Stop()
		cpuCheck = cpuTimer.C
	}
	// The memory watch: see thrash.go.
	var memCheck <-chan time.Time
	var memTimer *time.Timer
	var thrash *thrashDetector
	if sp.Memory > 0 && s.cg != nil {
		thrash = newThrashDetector(sp.Memory)
		memTimer = time.NewTimer(thrashTick)
		defer memTimer.Stop()
		memCheck = memTimer.C
	}
	var grace <-chan time.Time
	done := s.ctx.Done()
	exited := s.notStarted
	for exited == nil {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				return s.initDied()
			}
			if m.Type == boxinit.MsgExited {
				exited = &m
			} else if m.Type == boxinit.MsgError {
				return fmt.Errorf("box init failed: %w", m.StepError())
			}
		case <-wall.C:
			// A supervisor that got no CPU for a while (a loaded host) can
			// find both limits run out at once: the CPU limit is the one the
			// program hit, whichever timer it reads first.
			limit := LimitWall
			if sp.CPUTime > 0 && s.cg != nil {
				s.cg.SyncCPU()
				if used, err := s.cg.CPUUsage(); err == nil && used >= cpuBudget {
					limit = LimitCPU
				}
			}
			s.kill(limit)
			grace = time.After(killGrace)
		case <-cpuCheck:
			used, err := s.cg.CPUUsage()
			if err != nil {
				return cgroupReadErr("read CPU usage", err)
			}
			// The cgroup's counter lags a running thread by up to a
			// scheduler tick (4 ms at HZ=250) per CPU. Near the end, have
			// the kernel charge what the box's running threads have used
			// so far, and read again.
			if cpuBudget-used < time.Duration(cpus*float64(preciseCPUWindow)) {
				s.cg.SyncCPU()
				if used, err = s.cg.CPUUsage(); err != nil {
					return cgroupReadErr("read CPU usage", err)
				}
			}
			if used >= cpuBudget {
				s.kill(LimitCPU)
				grace = time.After(killGrace)
				continue
			}
			// The earliest the budget can run out is when every CPU the
			// box may use spends the rest of it; never poll blindly.
			next := time.Duration(float64(cpuBudget-used) / cpus)
			if next < time.Millisecond {
				next = time.Millisecond
			}
			cpuTimer.Reset(next)
		case <-memCheck:
			usage, refaults, err := s.cg.MemoryUsage()
			if err != nil {
				// A kernel without refault counts: the watch is off.
				memCheck = nil
				continue
			}
			if thrash.thrashing(usage, refaults) {
				s.kill(LimitMemory)
				grace = time.After(killGrace)
				memCheck = nil
				continue
			}
			memTimer.Reset(thrashTick)
		case <-done:
			// The caller gave up: stop the program as for a limit, then
			// account and tear down as usual.
			done = nil
			s.interrupted = interruption(s.ctx)
			s.kill(LimitNone)
			grace = time.After(killGrace)
		case <-grace:
			s.init.Kill()
			return errors.New("box init did not stop the program after a limit was hit")
		}
	}
	wallTime := time.Since(start)
	s.timer.mark("program")
	if exited.WallNs > 0 {
		wallTime = time.Duration(exited.WallNs)
	}
	return s.account(exited, wallTime)
}

// cgroupReadErr explains a failed read of the box's cgroup. The cgroup is
// the run's while it holds the box's lock: one gone under a running box
// (ENODEV on a file kept open, ENOENT on a new open) was removed by a
// process that does not take the locks in LockDir, such as an isolate
// built before them (it held box ids as abstract unix sockets) running on
// the same host: it sees the box as free, sweeps its cgroup and kills
// what is in it.
func cgroupReadErr(what string, err error) error {
	if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s: %w (the box's cgroup was removed under the running box, by a process that ignores the box locks in %s)", what, err, LockDir)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// kill stops the program because it hit a limit (only the first counts).
func (s *supervisor) kill(limit string) {
	if s.report.Killed {
		return
	}
	s.report.Killed = true
	s.report.Limit = limit
	s.ctl.Write([]byte{boxinit.CtlKill})
}

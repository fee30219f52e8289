package isolate

import (
	"strconv"
	"syscall"
	"time"
)

// verdictInput is what a run's verdict rests on, as plain values: init's
// report of the program's end, what the box used, its limits and why the
// supervisor killed it.
type verdictInput struct {
	// Wait is the program's wait status, as init reaped it.
	Wait syscall.WaitStatus
	// ExecErr is init's message for a program that could not be started,
	// and StartFailure the step that failed; both empty if it started.
	ExecErr      string
	StartFailure *StepError
	// CPU is the CPU time the box used (the cgroup's, or init's rusage).
	CPU time.Duration
	// CPULimit and ExtraTime are the spec's CPU time limit (0: none) and
	// the grace beyond it before the program is killed.
	CPULimit, ExtraTime time.Duration
	// Killed: the supervisor killed the program, for KillLimit (LimitCPU,
	// LimitWall, LimitMemory; LimitNone when the caller gave up).
	Killed    bool
	KillLimit string
	// OOMKilled: the kernel's OOM killer acted in the box's cgroup.
	OOMKilled bool
	// NoCgroup: the run had no cgroup. RlimitCPU: its CPU limit is the
	// program's RLIMIT_CPU (rlimits alone, rootless.go; a session's
	// command), which ends it by SIGXCPU.
	NoCgroup, RlimitCPU bool
}

// verdictOutput is the verdict's part of the report.
type verdictOutput struct {
	Status   Status
	Limit    string // the limit the program hit, if any
	Message  string
	Cause    error // why the sandbox failed (status XX)
	ExitCode int   // 128+signal for a program a signal ended
	Signal   int
}

// verdict decides a run's status from what the kernel and init said.
// Which comes first matters: a step of the sandbox's own that failed is
// the sandbox's failure; a kill by the supervisor names the limit it hit,
// whatever the program's wait status says (the kill's SIGKILL, or an exit
// it made as the limit ran out); then the OOM killer; then CPU time over
// the limit without a kill (the program ended before the supervisor
// looked); then the program's own signal or exit status.
func verdict(in verdictInput) verdictOutput {
	ws := in.Wait
	out := verdictOutput{Message: in.ExecErr}
	if in.Killed {
		out.Limit = in.KillLimit
	}
	switch {
	case ws.Signaled():
		out.Signal = int(ws.Signal())
		out.ExitCode = 128 + out.Signal
	default:
		out.ExitCode = ws.ExitStatus()
	}
	overCPU := in.CPULimit > 0 && (in.CPU > in.CPULimit || hitRlimitCPU(in))
	if wallKillOverCPU(in) {
		out.Limit = LimitCPU
	}
	switch {
	case in.StartFailure != nil && in.StartFailure.Step != "execve":
		// A step of the sandbox's own before the program's execve failed
		// (its working directory, credentials, limits, filter): that is
		// the sandbox failing, not the program. A program that is not
		// there stays RE 127, as a shell says it.
		out.Status, out.Cause = StatusXX, in.StartFailure
	case in.Killed && out.Limit == LimitMemory:
		// Not the OOM killer: the sandbox ended a box stuck at its limit
		// (thrash.go). oom_killed says which.
		out.Status = StatusML
		out.Message = "memory limit exceeded: killed by the sandbox, stuck reclaiming its own pages at the limit"
		if in.OOMKilled {
			out.Message = "memory limit exceeded"
		}
	case in.Killed:
		out.Status = StatusTO
		if out.Limit == LimitCPU {
			out.Message = "CPU time limit exceeded"
		} else {
			out.Message = "wall time limit exceeded"
		}
	case in.OOMKilled:
		out.Status = StatusML
		out.Message = "memory limit exceeded"
	case overCPU:
		out.Status, out.Limit, out.Message = StatusTO, LimitCPU, "CPU time limit exceeded"
	case ws.Signaled():
		out.Status = StatusSG
		if out.Message == "" {
			out.Message = "caught signal " + strconv.Itoa(out.Signal)
		}
	case out.ExitCode != 0:
		out.Status = StatusRE
		if out.Message == "" {
			out.Message = "exited with status " + strconv.Itoa(out.ExitCode)
		}
	default:
		out.Status = StatusOK
	}
	return out
}

// hitRlimitCPU tells whether RLIMIT_CPU, as the CPU limit, ended the
// program: its SIGXCPU (the hard limit, a second later, is SIGKILL, and
// the CPU time then tells). The kernel counts RLIMIT_CPU by the
// scheduler's tick samples, which run ahead of the exact CPU time under
// load: the report's cpu_time may be below the limit.
func hitRlimitCPU(in verdictInput) bool {
	return in.RlimitCPU && in.Wait.Signaled() && in.Wait.Signal() == syscall.SIGXCPU
}

// wallKillOverCPU tells whether a wall-clock kill is a CPU one, with
// rlimits alone: the program had spent its CPU time by then (RLIMIT_CPU
// counts whole seconds, and the wall limit may come first; with a cgroup
// the supervisor reads the CPU time as it kills).
func wallKillOverCPU(in verdictInput) bool {
	return in.NoCgroup && in.Killed && in.KillLimit == LimitWall && in.CPULimit > 0 && in.CPU >= in.CPULimit+in.ExtraTime
}

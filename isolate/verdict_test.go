package isolate

import (
	"syscall"
	"testing"
	"time"
)

// exited and signaled are the wait statuses wait4 gives for an exit with
// code c and for a death by signal sig.
func exited(c int) syscall.WaitStatus                { return syscall.WaitStatus(c << 8) }
func signaled(sig syscall.Signal) syscall.WaitStatus { return syscall.WaitStatus(sig) }

// The verdict's rules, without a box: which status each ending gets, at
// and around each limit.
func TestVerdict(t *testing.T) {
	sec := time.Second
	notFound := &StepError{Step: "execve", Errno: int(syscall.ENOENT), Msg: "No such file or directory"}
	chdirFailed := &StepError{Step: "chdir", Errno: int(syscall.ENOENT), Msg: "No such file or directory"}
	cases := []struct {
		name string
		in   verdictInput
		want verdictOutput
	}{
		{"exit 0", verdictInput{Wait: exited(0)},
			verdictOutput{Status: StatusOK}},
		{"exit 3", verdictInput{Wait: exited(3)},
			verdictOutput{Status: StatusRE, ExitCode: 3, Message: "exited with status 3"}},
		{"exit 255", verdictInput{Wait: exited(255)},
			verdictOutput{Status: StatusRE, ExitCode: 255, Message: "exited with status 255"}},
		{"SIGSEGV", verdictInput{Wait: signaled(syscall.SIGSEGV)},
			verdictOutput{Status: StatusSG, ExitCode: 139, Signal: 11, Message: "caught signal 11"}},
		{"SIGSEGV with a core", verdictInput{Wait: signaled(syscall.SIGSEGV) | 0x80},
			verdictOutput{Status: StatusSG, ExitCode: 139, Signal: 11, Message: "caught signal 11"}},
		// A SIGKILL the program sent itself (or a process of its own) is
		// no limit: neither killed by the supervisor nor the OOM killer.
		{"SIGKILL by the program", verdictInput{Wait: signaled(syscall.SIGKILL), CPULimit: sec},
			verdictOutput{Status: StatusSG, ExitCode: 137, Signal: 9, Message: "caught signal 9"}},

		// Start failures: a program that is not there is the program's
		// (RE 127, as a shell says it); a step of the sandbox's own is XX.
		{"program not found", verdictInput{Wait: exited(127), ExecErr: `execve("nope"): No such file or directory`, StartFailure: notFound},
			verdictOutput{Status: StatusRE, ExitCode: 127, Message: `execve("nope"): No such file or directory`}},
		{"sandbox step failed", verdictInput{Wait: exited(127), ExecErr: "chdir: No such file or directory", StartFailure: chdirFailed},
			verdictOutput{Status: StatusXX, ExitCode: 127, Message: "chdir: No such file or directory", Cause: chdirFailed}},
		{"sandbox step failed outranks a kill", verdictInput{Wait: exited(127), ExecErr: "chdir: x", StartFailure: chdirFailed, Killed: true, KillLimit: LimitWall, OOMKilled: true},
			verdictOutput{Status: StatusXX, ExitCode: 127, Limit: LimitWall, Message: "chdir: x", Cause: chdirFailed}},
		{"exit 127 of the program's own", verdictInput{Wait: exited(127)},
			verdictOutput{Status: StatusRE, ExitCode: 127, Message: "exited with status 127"}},

		// Kills by the supervisor: the limit it hit, whatever the wait
		// status (its SIGKILL, or an exit as the limit ran out).
		{"killed for wall time", verdictInput{Wait: signaled(syscall.SIGKILL), Killed: true, KillLimit: LimitWall, CPULimit: sec, CPU: sec / 2},
			verdictOutput{Status: StatusTO, Limit: LimitWall, ExitCode: 137, Signal: 9, Message: "wall time limit exceeded"}},
		{"killed for CPU time", verdictInput{Wait: signaled(syscall.SIGKILL), Killed: true, KillLimit: LimitCPU, CPULimit: sec, CPU: sec + 1},
			verdictOutput{Status: StatusTO, Limit: LimitCPU, ExitCode: 137, Signal: 9, Message: "CPU time limit exceeded"}},
		{"exit 0 after a wall kill", verdictInput{Wait: exited(0), Killed: true, KillLimit: LimitWall},
			verdictOutput{Status: StatusTO, Limit: LimitWall, Message: "wall time limit exceeded"}},
		{"exit 1 after a CPU kill", verdictInput{Wait: exited(1), Killed: true, KillLimit: LimitCPU, CPULimit: sec, CPU: sec},
			verdictOutput{Status: StatusTO, Limit: LimitCPU, ExitCode: 1, Message: "CPU time limit exceeded"}},
		{"CPU kill outranks the OOM killer", verdictInput{Wait: signaled(syscall.SIGKILL), Killed: true, KillLimit: LimitCPU, OOMKilled: true},
			verdictOutput{Status: StatusTO, Limit: LimitCPU, ExitCode: 137, Signal: 9, Message: "CPU time limit exceeded"}},
		// A wall kill with a cgroup stays one: the supervisor read the CPU
		// time as it killed.
		{"wall kill with a cgroup over CPU", verdictInput{Wait: signaled(syscall.SIGKILL), Killed: true, KillLimit: LimitWall, CPULimit: sec, CPU: 2 * sec},
			verdictOutput{Status: StatusTO, Limit: LimitWall, ExitCode: 137, Signal: 9, Message: "wall time limit exceeded"}},
		// The caller gave up: a kill for no limit (the run then turns it XX).
		{"interrupted", verdictInput{Wait: signaled(syscall.SIGKILL), Killed: true, KillLimit: LimitNone},
			verdictOutput{Status: StatusTO, Limit: LimitNone, ExitCode: 137, Signal: 9, Message: "wall time limit exceeded"}},

		// Memory: the OOM killer, or the supervisor ending a box stuck at
		// its limit (oom_killed says which).
		{"OOM kill", verdictInput{Wait: signaled(syscall.SIGKILL), OOMKilled: true},
			verdictOutput{Status: StatusML, ExitCode: 137, Signal: 9, Message: "memory limit exceeded"}},
		{"OOM kill of a child, exit 0", verdictInput{Wait: exited(0), OOMKilled: true},
			verdictOutput{Status: StatusML, Message: "memory limit exceeded"}},
		{"OOM kill outranks CPU over the limit", verdictInput{Wait: signaled(syscall.SIGKILL), OOMKilled: true, CPULimit: sec, CPU: 2 * sec},
			verdictOutput{Status: StatusML, ExitCode: 137, Signal: 9, Message: "memory limit exceeded"}},
		{"killed stuck at the memory limit", verdictInput{Wait: signaled(syscall.SIGKILL), Killed: true, KillLimit: LimitMemory},
			verdictOutput{Status: StatusML, Limit: LimitMemory, ExitCode: 137, Signal: 9, Message: "memory limit exceeded: killed by the sandbox, stuck reclaiming its own pages at the limit"}},
		{"killed stuck at the memory limit, OOM too", verdictInput{Wait: signaled(syscall.SIGKILL), Killed: true, KillLimit: LimitMemory, OOMKilled: true},
			verdictOutput{Status: StatusML, Limit: LimitMemory, ExitCode: 137, Signal: 9, Message: "memory limit exceeded"}},

		// CPU time over the limit without a kill: the program ended before
		// the supervisor looked. Exactly at the limit is within it; the
		// extra time is a grace before the kill, not more budget.
		{"CPU exactly at the limit", verdictInput{Wait: exited(0), CPULimit: sec, CPU: sec},
			verdictOutput{Status: StatusOK}},
		{"CPU just over the limit", verdictInput{Wait: exited(0), CPULimit: sec, CPU: sec + 1},
			verdictOutput{Status: StatusTO, Limit: LimitCPU, Message: "CPU time limit exceeded"}},
		{"CPU over the limit within the extra time", verdictInput{Wait: exited(0), CPULimit: sec, ExtraTime: sec, CPU: sec + sec/2},
			verdictOutput{Status: StatusTO, Limit: LimitCPU, Message: "CPU time limit exceeded"}},
		{"CPU over the limit outranks a crash", verdictInput{Wait: signaled(syscall.SIGSEGV), CPULimit: sec, CPU: 2 * sec},
			verdictOutput{Status: StatusTO, Limit: LimitCPU, ExitCode: 139, Signal: 11, Message: "CPU time limit exceeded"}},
		{"CPU without a limit", verdictInput{Wait: exited(0), CPU: time.Hour},
			verdictOutput{Status: StatusOK}},

		// Rlimits alone (no cgroup): RLIMIT_CPU's SIGXCPU is the CPU limit,
		// and a wall kill after the CPU budget was spent is a CPU one.
		{"SIGXCPU with rlimits alone", verdictInput{Wait: signaled(syscall.SIGXCPU), NoCgroup: true, RlimitCPU: true, CPULimit: sec, CPU: sec - time.Millisecond},
			verdictOutput{Status: StatusTO, Limit: LimitCPU, ExitCode: 128 + 24, Signal: 24, Message: "CPU time limit exceeded"}},
		{"SIGXCPU with a cgroup", verdictInput{Wait: signaled(syscall.SIGXCPU), CPULimit: sec, CPU: sec - time.Millisecond},
			verdictOutput{Status: StatusSG, ExitCode: 128 + 24, Signal: 24, Message: "caught signal 24"}},
		{"SIGXCPU with rlimits alone, no CPU limit", verdictInput{Wait: signaled(syscall.SIGXCPU), NoCgroup: true, RlimitCPU: true},
			verdictOutput{Status: StatusSG, ExitCode: 128 + 24, Signal: 24, Message: "caught signal 24"}},
		{"no cgroup, wall kill at the CPU budget", verdictInput{Wait: signaled(syscall.SIGKILL), NoCgroup: true, RlimitCPU: true, Killed: true, KillLimit: LimitWall, CPULimit: sec, ExtraTime: sec / 2, CPU: sec + sec/2},
			verdictOutput{Status: StatusTO, Limit: LimitCPU, ExitCode: 137, Signal: 9, Message: "CPU time limit exceeded"}},
		{"no cgroup, wall kill short of the CPU budget", verdictInput{Wait: signaled(syscall.SIGKILL), NoCgroup: true, RlimitCPU: true, Killed: true, KillLimit: LimitWall, CPULimit: sec, ExtraTime: sec / 2, CPU: sec + sec/2 - 1},
			verdictOutput{Status: StatusTO, Limit: LimitWall, ExitCode: 137, Signal: 9, Message: "wall time limit exceeded"}},
		{"no cgroup, wall kill, no CPU limit", verdictInput{Wait: signaled(syscall.SIGKILL), NoCgroup: true, RlimitCPU: true, Killed: true, KillLimit: LimitWall, CPU: time.Hour},
			verdictOutput{Status: StatusTO, Limit: LimitWall, ExitCode: 137, Signal: 9, Message: "wall time limit exceeded"}},
	}
	for _, c := range cases {
		got := verdict(c.in)
		if got != c.want {
			t.Errorf("%s: verdict(%+v)\n = %+v\nwant %+v", c.name, c.in, got, c.want)
		}
	}
}

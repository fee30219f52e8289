package api

import "github.com/isolate-sandbox/isolate/isolate/egress"

// Status is the outcome of a run.
type Status string

const (
	StatusOK Status = "OK" // exited 0 within all limits
	StatusRE Status = "RE" // non-zero exit
	StatusSG Status = "SG" // killed by a signal not from the sandbox
	StatusTO Status = "TO" // CPU or wall limit
	StatusML Status = "ML" // the OOM killer acted in the box, or the sandbox killed it stuck at the memory limit
	StatusXX Status = "XX" // the sandbox failed
	StatusCE Status = "CE" // compilation failed (exec)
)

// The limits a TO (cpu, wall) or a sandbox-killed ML (memory) names in
// Report.Limit.
const (
	LimitCPU    = "cpu"
	LimitWall   = "wall"
	LimitMemory = "memory"
	LimitNone   = ""
)

// Report is what a run used and how it ended (the contract's JSON report).
type Report struct {
	Status   Status `json:"status"`
	Message  string `json:"message"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal"`
	Killed   bool   `json:"killed"`
	Limit    string `json:"limit"`

	CPUTime  float64 `json:"cpu_time"`
	UserTime float64 `json:"user_time"`
	SysTime  float64 `json:"sys_time"`
	WallTime float64 `json:"wall_time"`

	MemoryPeak     int64 `json:"memory_peak"`
	MaxRSS         int64 `json:"max_rss"`
	OOMKilled      bool  `json:"oom_killed"`
	PidsPeak       int64 `json:"pids_peak"`
	CSWVoluntary   int64 `json:"csw_voluntary"`
	CSWInvoluntary int64 `json:"csw_involuntary"`

	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`

	BlockedSyscalls []Blocked `json:"blocked_syscalls"`
	// Network is what a box with an allowlist asked to reach: every
	// connection, allowed or refused (absent without an allowlist).
	Network *egress.Report `json:"network,omitempty"`
	BoxID   int            `json:"box_id"`
	Sandbox SandboxInfo    `json:"sandbox"`
	// RequestID is the service's id of the request that ran it (its
	// X-Request-Id and audit line); empty in-process.
	RequestID string `json:"request_id,omitempty"`

	// Cause is why the sandbox failed (status XX), for errors.As: a
	// *StepError for a failed step of building the box, context.Cause
	// when the caller's context ended the run. Not in the JSON report.
	Cause error `json:"-"`
	// StartFailure is why the program could not be started (exit code
	// 127 from the sandbox, not from the program): the step, its errno.
	// Not part of the JSON report, whose message says it in words.
	StartFailure *StepError `json:"-"`
}

// Blocked is a syscall the policy refused, and how often.
type Blocked struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// SandboxInfo describes the sandbox that ran the program and what it cost.
type SandboxInfo struct {
	Image   string `json:"image"`
	Cgroup  string `json:"cgroup"`
	Seccomp string `json:"seccomp"`
	// Via is which path ran the run: "in-process" (the isolate command
	// itself) or "service" (isolate serve, over HTTP or handed a
	// command line by the isolate command).
	Via          string  `json:"via"`
	SetupTime    float64 `json:"setup_time"`
	TeardownTime float64 `json:"teardown_time"`
	// Stages are the supervisor's own timers, in seconds, for `isolate
	// bench`: where the setup and teardown time went.
	Stages map[string]float64 `json:"stages,omitempty"`
	// Limits says, for a run without root, how each limit was enforced:
	// "cgroup" (a delegated cgroup v2 subtree), "rlimit" (rlimits alone,
	// which the caller allowed), "supervisor" (the wall clock), "none"
	// (no limit asked). With a memory limit on rlimits alone,
	// "memory_rlimit" says which: "address-space" (RLIMIT_AS), "data"
	// (RLIMIT_DATA) or "none" (the language's rlimit_memory). Root's
	// limits are always the cgroup's: absent.
	Limits map[string]string `json:"limits,omitempty"`
	// User says, for a run without root, who the box user is on the host:
	// "caller" (the caller's own uid and gid) or "subordinate" (a
	// subordinate uid and gid of the caller's, /etc/subuid and
	// /etc/subgid). Root's box users are always a uid of their own: absent.
	User string `json:"user,omitempty"`
	// HostUID and HostGID are, for a run without root, the uid and gid
	// on the host the program ran as (the box's own map says so).
	HostUID int `json:"host_uid,omitempty"`
	HostGID int `json:"host_gid,omitempty"`
}

// ExecReport is `isolate exec`'s report: the outcome, and the report of
// each phase that ran (null when it did not).
type ExecReport struct {
	Status  Status  `json:"status"`
	Compile *Report `json:"compile"`
	Run     *Report `json:"run"`
}

// Last is the report of the phase that decided the outcome: the run's,
// else the compiler's; nil if neither ran.
func (r *ExecReport) Last() *Report {
	if r.Run != nil {
		return r.Run
	}
	return r.Compile
}

// Failed tells whether a finished run's status is a failure of the
// program (RE, SG, TO, ML, CE) rather than success or the sandbox's.
func (s Status) Failed() bool { return s != StatusOK && s != StatusXX }

package isolate

import (
	"github.com/isolate-sandbox/isolate/rootfs"
)

// InitArg is the hidden first argument that turns the isolate binary into
// a box's init. Every binary that starts boxes, test binaries included,
// must call MaybeInit before anything else.
const InitArg = "__isolate_init__"

// The fixed descriptors of init. 0-2 are the program's standard streams.
const (
	fdControl = 3 // supervisor -> init: the config (one JSON line), then control bytes
	fdStatus  = 4 // init -> supervisor: status messages, one JSON line each
	fdCgroup  = 5 // v1: the box's "tasks" files from here on; v2: the box's cgroup directory
)

// Control bytes the supervisor sends after the config.
const (
	ctlGo   = 'g' // the box is filled (copy-in done): start the program
	ctlKill = 'k' // a limit was hit: kill every process of the program
)

// initConfig is what init needs, sent as the first line on fdControl.
type initConfig struct {
	Layout    rootfs.Layout `json:"layout"`
	Argv      []string      `json:"argv"`
	Env       []string      `json:"env"`
	Dir       string        `json:"dir"`
	UID       int           `json:"uid"`
	GID       int           `json:"gid"`
	Loopback  bool          `json:"loopback"` // bring up lo (own network namespace)
	WaitForGo bool          `json:"wait_for_go"`
	Rlimits   []rlimit      `json:"rlimits"`
	// CgroupFiles is the number of v1 "tasks" files passed from fdCgroup
	// on; CgroupDir says fdCgroup is a v2 directory instead.
	CgroupFiles int    `json:"cgroup_files"`
	CgroupDir   bool   `json:"cgroup_dir"`
	Seccomp     []byte `json:"seccomp,omitempty"`
	Notify      bool   `json:"notify,omitempty"`
	// StderrToStdout makes the program's fd 2 a copy of its fd 1.
	StderrToStdout bool `json:"stderr_to_stdout,omitempty"`
}

type rlimit struct {
	Resource int    `json:"r"`
	Value    uint64 `json:"v"`
}

// Message types sent by init.
const (
	msgReady   = "ready"   // the file system is built; waiting for ctlGo
	msgStarted = "started" // the program runs
	msgExited  = "exited"  // the program and everything it left are gone
	msgError   = "error"   // a setup step failed
)

// initMessage is one status line from init.
type initMessage struct {
	Type string `json:"type"`
	// started
	NotifyFD int `json:"notify_fd,omitempty"`
	// Stages are init's own timers (ns), for the stage breakdown.
	Stages map[string]int64 `json:"stages,omitempty"`
	// exited
	WaitStatus uint32 `json:"ws,omitempty"`
	WallNs     int64  `json:"wall_ns,omitempty"`
	UserNs     int64  `json:"utime_ns,omitempty"`
	SysNs      int64  `json:"stime_ns,omitempty"`
	MaxRSS     int64  `json:"maxrss_kb,omitempty"`
	NVCSW      int64  `json:"nvcsw,omitempty"`
	NIVCSW     int64  `json:"nivcsw,omitempty"`
	// ExecErr is set when the program could not be executed at all.
	ExecErr string `json:"exec_err,omitempty"`
	// error
	Step  string `json:"step,omitempty"`
	Err   string `json:"err,omitempty"`
	Errno int    `json:"errno,omitempty"`
}

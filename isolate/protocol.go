package isolate

import (
	"encoding/binary"
	"strconv"

	"github.com/isolate-sandbox/isolate/rootfs"
)

// InitArg is the hidden first argument that turns the isolate binary into
// a box's init (see init.c).
const InitArg = "__isolate_init__"

// The fixed descriptors of init. 0-2 are the program's standard streams.
const (
	fdControl = 3 // supervisor <-> init, a stream socket: the plan (with the cgroup files), then control bytes
	fdStatus  = 4 // init -> supervisor: status messages, one JSON line each
	// From 5 on: the seccomp listener socket, then the image's mount, if any.
)

// Control bytes the supervisor sends after the plan.
const (
	ctlGo   = 'g' // the box is filled (copy-in done): start the program
	ctlKill = 'k' // a limit was hit: kill every process of the program
)

// plan is what init carries out, in order: records of length-prefixed
// fields (step name, operation, arguments), ending with "end".
type plan struct{ buf []byte }

func (p *plan) add(step, op string, args ...string) {
	p.buf = binary.LittleEndian.AppendUint32(p.buf, uint32(2+len(args)))
	for _, f := range append([]string{step, op}, args...) {
		p.buf = binary.LittleEndian.AppendUint32(p.buf, uint32(len(f)))
		p.buf = append(p.buf, f...)
	}
}

func (p *plan) addOps(ops []rootfs.Op) {
	for _, op := range ops {
		p.add(op.Step, op.Name, op.Args...)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

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
	// ready, started, exited: the box's PID 1 in the host's PID namespace.
	Pid int `json:"pid,omitempty"`
	// started: init's own timers (ns), for the stage breakdown.
	Stages map[string]int64 `json:"stages,omitempty"`
	// exited
	WaitStatus uint32 `json:"ws,omitempty"`
	WallNs     int64  `json:"wall_ns,omitempty"`
	UserNs     int64  `json:"utime_ns,omitempty"`
	SysNs      int64  `json:"stime_ns,omitempty"`
	MaxRSS     int64  `json:"maxrss_kb,omitempty"`
	NVCSW      int64  `json:"nvcsw,omitempty"`
	NIVCSW     int64  `json:"nivcsw,omitempty"`
	// ExecErr is set when the program could not be started at all.
	ExecErr string `json:"exec_err,omitempty"`
	// error
	Step  string `json:"step,omitempty"`
	Err   string `json:"err,omitempty"`
	Errno int    `json:"errno,omitempty"`
}

package boxinit

// #include "protocol.h"
import "C"

import (
	"encoding/binary"
	"fmt"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// The protocol's constants come from protocol.h, which init's C code
// includes too: they are defined once. doc.go describes the conversation.

// InitArg is the hidden first argument that turns the isolate binary into
// a box's init (see init_main.c).
const InitArg = C.ISOLATE_INIT_ARG

// The fixed descriptors of init. 0-2 are the program's standard streams.
const (
	FDControl = C.ISOLATE_FD_CONTROL // supervisor <-> init, a stream socket: the plan, then control bytes
	fdStatus  = C.ISOLATE_FD_STATUS  // init -> supervisor: status messages, one JSON line each
	FDExtra   = C.ISOLATE_FD_EXTRA   // the seccomp listener socket, then the image's mount, if any
	FDProxy   = C.ISOLATE_FD_PROXY   // PID 1's listener for the network allowlist's proxy
)

// ctlKill, sent once the plan is complete, makes init kill every process
// of the program (a limit was hit).
const CtlKill = C.ISOLATE_CTL_KILL

// Message types sent by init.
const (
	MsgReady   = C.ISOLATE_MSG_READY   // the box is built; waiting for the command part
	MsgStarted = C.ISOLATE_MSG_STARTED // the program runs
	MsgExited  = C.ISOLATE_MSG_EXITED  // the program and everything it left are gone
	MsgError   = C.ISOLATE_MSG_ERROR   // a step failed
)

// plan is what init carries out, in order: typed records (protocol.h), a
// box part then a command part. Each operation has one encoder below.
type Plan struct {
	Buf       []byte
	Announces bool // a box part that asks init to say when the box is built
}

// op appends one record.
func (p *Plan) op(code C.enum_isolate_op, step string, ints []uint64, strs ...string) {
	p.Buf = binary.LittleEndian.AppendUint32(p.Buf, uint32(code))
	p.Buf = binary.LittleEndian.AppendUint32(p.Buf, uint32(len(ints)))
	p.Buf = binary.LittleEndian.AppendUint32(p.Buf, uint32(len(strs)))
	p.str(step)
	for _, v := range ints {
		p.Buf = binary.LittleEndian.AppendUint64(p.Buf, v)
	}
	for _, s := range strs {
		p.str(s)
	}
}

func (p *Plan) str(s string) {
	p.Buf = binary.LittleEndian.AppendUint32(p.Buf, uint32(len(s)))
	p.Buf = append(p.Buf, s...)
}

func flag(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// ---- the box part ----

// placeFD has an early init give the next descriptor sent with the box
// part the number fd (earlyinit.go).
func (p *Plan) PlaceFD(fd int) {
	p.op(C.ISOLATE_OP_PLACE_FD, "place a descriptor", []uint64{uint64(fd)})
}

func (p *Plan) Hostname(name string) { p.op(C.ISOLATE_OP_HOSTNAME, "set host name", nil, name) }

func (p *Plan) Loopback() { p.op(C.ISOLATE_OP_LOOPBACK, "bring up loopback", nil) }

// listen has PID 1 listen on the box's loopback at fdProxy, for the
// network allowlist's proxy (egress.go).
func (p *Plan) Listen(port int) {
	p.op(C.ISOLATE_OP_LISTEN, "listen on the box's loopback for its network allowlist", []uint64{uint64(port)})
}

func (p *Plan) Sysctl(step, path, value string) { p.op(C.ISOLATE_OP_SYSCTL, step, nil, path, value) }

// fs appends the file system's operations (rootfs.Plan).
func (p *Plan) FS(ops []rootfs.Op) {
	for _, o := range ops {
		switch o := o.(type) {
		case rootfs.MakePrivate:
			p.op(C.ISOLATE_OP_PRIVATE, o.Step, nil)
		case rootfs.Mount:
			p.op(C.ISOLATE_OP_MOUNT, o.Step, []uint64{o.Flags}, o.Source, o.Target, o.FSType, o.Data)
		case rootfs.MoveMount:
			p.op(C.ISOLATE_OP_MOVE_MOUNT, o.Step, []uint64{uint64(o.Tree)}, o.Target)
		case rootfs.SetAttr:
			p.op(C.ISOLATE_OP_SETATTR, o.Step, []uint64{o.Attrs, flag(o.Recursive)}, o.Path)
		case rootfs.Mkdir:
			p.op(C.ISOLATE_OP_MKDIR, o.Step, []uint64{uint64(o.Mode)}, o.Path)
		case rootfs.Touch:
			p.op(C.ISOLATE_OP_TOUCH, o.Step, []uint64{uint64(o.Mode)}, o.Path)
		case rootfs.Symlink:
			p.op(C.ISOLATE_OP_SYMLINK, o.Step, nil, o.Target, o.Path)
		case rootfs.WriteFile:
			p.op(C.ISOLATE_OP_WRITE, o.Step, []uint64{uint64(o.Mode)}, o.Path, o.Content)
		case rootfs.RemountRO:
			p.op(C.ISOLATE_OP_REMOUNT_RO, o.Step, nil, o.Path)
		case rootfs.Pivot:
			p.op(C.ISOLATE_OP_PIVOT, o.Step, nil, o.Root)
		default:
			panic(fmt.Sprintf("isolate: no encoding for %T", o))
		}
	}
}

// prepare has a box built ahead start its program's process with the box,
// filter (BPF) loaded, listener or not: a command with that filter and
// listener then skips those steps (init_proc.c).
func (p *Plan) Prepare(filter []byte, listen bool) {
	p.op(C.ISOLATE_OP_PREPARE, "prepare the program's process", []uint64{flag(listen)}, string(filter))
}

// session has init serve many commands in the box, until the control
// socket closes (init_session.c).
func (p *Plan) Session() { p.op(C.ISOLATE_OP_SESSION, "serve a session", nil) }

// boxEnd closes the box part. With announce, init says msgReady once the
// box is built (a caller that fills the box before its command).
func (p *Plan) BoxEnd(announce bool) {
	p.Announces = announce
	p.op(C.ISOLATE_OP_BOX_END, "box built", []uint64{flag(announce)})
}

// ---- the command part ----

func (p *Plan) Argv(args []string) { p.op(C.ISOLATE_OP_ARGV, "program", nil, args...) }

func (p *Plan) Env(env []string) { p.op(C.ISOLATE_OP_ENV, "environment", nil, env...) }

func (p *Plan) Dir(dir string) { p.op(C.ISOLATE_OP_DIR, "working directory", nil, dir) }

func (p *Plan) Cred(uid, gid uint32) {
	p.op(C.ISOLATE_OP_CRED, "credentials", []uint64{uint64(uid), uint64(gid)})
}

func (p *Plan) Rlimit(resource int, limit uint64) {
	p.op(C.ISOLATE_OP_RLIMIT, "resource limit", []uint64{uint64(resource), limit})
}

// cgroupTasks and cgroupFork name a descriptor sent with the command part
// by its index among them.
func (p *Plan) CgroupTasks(i int) { p.op(C.ISOLATE_OP_CGROUP_TASKS, "cgroup", []uint64{uint64(i)}) }

func (p *Plan) CgroupFork(i int) { p.op(C.ISOLATE_OP_CGROUP_FORK, "cgroup", []uint64{uint64(i)}) }

// seccomp loads filter (BPF) before the exec; notifySock is init's
// descriptor of the listener socket, or -1 for none.
func (p *Plan) Seccomp(filter []byte, notifySock int) {
	p.op(C.ISOLATE_OP_SECCOMP, "seccomp filter", []uint64{uint64(int64(notifySock))}, string(filter))
}

// stdio gives the program the descriptors sent with the command part at
// indexes in, out, errOut as its fd 0, 1, 2 (-1: init's own). A box built
// before its command (the pool) gets its streams this way.
func (p *Plan) Stdio(in, out, errOut int) {
	p.op(C.ISOLATE_OP_STDIO, "standard streams", []uint64{uint64(int64(in)), uint64(int64(out)), uint64(int64(errOut))})
}

func (p *Plan) StderrToStdout() { p.op(C.ISOLATE_OP_STDERR_TO_STDOUT, "stderr to stdout", nil) }

func (p *Plan) Hold() { p.op(C.ISOLATE_OP_HOLD, "keep the box for copy-out", nil) }

func (p *Plan) TellStart() { p.op(C.ISOLATE_OP_TELL_START, "tell the start at once", nil) }

// commandID numbers a session's command: init's messages about it carry
// the number.
func (p *Plan) CommandID(id uint64) { p.op(C.ISOLATE_OP_COMMAND_ID, "command number", []uint64{id}) }

// signal, a session's control record, sends sig to command id's process
// group (0: to every process of the box).
func (p *Plan) Signal(id uint64, sig int) {
	p.op(C.ISOLATE_OP_SIGNAL, "signal", []uint64{id, uint64(sig)})
}

// handOver has init give dirs, filled by the supervisor as the box's uid
// 0, to the program's user before it starts, and with back give them back
// to uid 0 once the box is reaped (protocol.h).
func (p *Plan) HandOver(back bool, dirs ...string) {
	p.op(C.ISOLATE_OP_HAND_OVER, "hand over the box's directories", []uint64{flag(back)}, dirs...)
}

// end closes the command part: init starts the program.
func (p *Plan) End() { p.op(C.ISOLATE_OP_END, "end", nil) }

// Message is one status line from init.
type Message struct {
	Type string `json:"type"`
	// ID is a session's command number (started, exited).
	ID uint64 `json:"id,omitempty"`
	// ready, started, exited: the box's PID 1 in the host's PID namespace.
	Pid int `json:"pid,omitempty"`
	// started: init's own timers (ns), for the stage breakdown, and when
	// the program's execve returned (CLOCK_MONOTONIC, ns): init tells
	// the start late (init_main.c).
	Stages map[string]int64 `json:"stages,omitempty"`
	ExecNs int64            `json:"exec_ns,omitempty"`
	// exited
	WaitStatus uint32 `json:"ws,omitempty"`
	WallNs     int64  `json:"wall_ns,omitempty"`
	UserNs     int64  `json:"utime_ns,omitempty"`
	SysNs      int64  `json:"stime_ns,omitempty"`
	MaxRSS     int64  `json:"maxrss_kb,omitempty"`
	NVCSW      int64  `json:"nvcsw,omitempty"`
	NIVCSW     int64  `json:"nivcsw,omitempty"`
	// ExecErr is set when the program could not be started at all (with
	// Step and Errno).
	ExecErr string `json:"exec_err,omitempty"`
	// error (and exited, see ExecErr): the step that failed, the
	// operation and the path it worked on, errno and its text.
	Step  string `json:"step,omitempty"`
	Op    string `json:"op,omitempty"`
	Path  string `json:"path,omitempty"`
	Err   string `json:"err,omitempty"`
	Errno int    `json:"errno,omitempty"`
}

// stepError is init's error message as a StepError.
func (m *Message) StepError() *api.StepError {
	msg := m.Err
	if m.Op != "" {
		msg = m.Op + " " + m.Path + ": " + m.Err
		if m.Path == "" {
			msg = m.Op + ": " + m.Err
		}
	}
	return &api.StepError{Step: m.Step, Errno: m.Errno, Msg: msg}
}

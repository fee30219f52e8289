package isolate

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
	"github.com/isolate-sandbox/isolate/isolate/egress/proxy"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
	"github.com/isolate-sandbox/isolate/seccomp"
)

func usagef(format string, a ...any) error { return &UsageError{Msg: fmt.Sprintf(format, a...)} }

// fieldf is bad input in one request field, named by its JSON path: each
// front end words it in its own vocabulary (api.Fields).
func fieldf(field, format string, a ...any) error {
	return &api.FieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// setupTimeout bounds how long init may take to build a box.
const setupTimeout = 10 * time.Second

// preciseCPUWindow is, per CPU the box may use, how close to its CPU
// limit the supervisor makes the kernel settle the box's CPU time before
// each check.
const preciseCPUWindow = 40 * time.Millisecond

// killGrace is how long init gets to kill the program and report before
// the supervisor kills init itself.
const killGrace = 2 * time.Second

// supervisor is the state of one run on the host side.
type supervisor struct {
	host   *Host
	spec   *Spec
	io     IO
	report *Report
	timer  stageTimer
	lock   *boxLock
	// aheadLock is the id's ahead lock of the box built ahead that the
	// run claimed, kept for the id's next box (pool_ahead.go).
	aheadLock *lock
	// netns is the network namespace the box joined, kept between a
	// persistent box id's boxes built ahead (netns.go); nil: the box
	// made its own, or has the host's.
	netns *boxNetns
	// next is the box of the id built while the run of a claimed box
	// runs (pool_ahead.go): the run's teardown tells it how it ended.
	next   *aheadBox
	cg     *boxCgroup
	policy *seccomp.Program
	initLink
	stdout *capture
	stderr *capture
	stdinW *os.File // the pipe a Reader given as stdin is copied into
	// An early init's (earlyinit.go): its descriptors from fdExtra on,
	// sent with the box part, and the program's streams, with the
	// command part.
	boxFiles, streams []*os.File
	closers           []*os.File // host ends to close once init has them
	// placement are the cgroup files through which the program joins the
	// box's cgroup; they reach init with the plan.
	placement  []*os.File
	notifySock int               // init's descriptor of the seccomp listener socket, or -1
	ownImage   *os.File          // the run's own image mount, until the box is planned
	cgroupDone chan cgroupResult // createCgroup's result, until awaitCgroup takes it
	notStarted *boxinit.Message  // init's "exited" for a program that could not be started
	execAt     time.Time         // when the program's execve returned (or its start failed)
	boxPid     int               // the box's PID 1, in the host's PID namespace
	proxy      *proxy.Proxy      // the allowlist's proxy, while the box runs
	notify     *os.File          // socket on which the program sends its seccomp listener
	rec        *seccomp.Recorder
	// copyDst are the --copy-out destinations, their directories opened
	// with the caller's rights before the program starts.
	copyDst []*hostfs.HostPath
	// binds are the bind sources, opened with the caller's rights before
	// init starts (bindsources.go), one per spec.Binds entry.
	binds []*bindSource
	// interrupted is why the context ended the run, once it has.
	interrupted error

	// image is where the supervisor and init find a mounted image's
	// files (see rootfs.MountSquashfs); empty: ImageDir.
	image, imageInInit string
	// boxInInit is where init finds spec.BoxMount.
	boxInInit string

	// ahead: this supervisor builds a box ahead of its command, for the
	// pool (pool.go): no limits, no streams, init waits once it is built.
	ahead bool
	// claimed is the box built ahead that this run took from the pool.
	claimed *pendingBox
	// session: the box serves many commands (session_box.go).
	session bool
	// hostUID and hostGID are, without root, the host uid and gid the
	// box's map gives the box user (appendInitMaps).
	hostUID, hostGID int
}

// run performs one sandboxed run: take a box the pool built ahead, or
// build one (hold a box id, create the cgroup while init starts and
// builds the box), start the program, supervise, account, tear down. A
// failure of the sandbox itself is a report with status XX.
func run(ctx context.Context, p *Prepared, stdio IO) *Report {
	spec := withDataCopies(p.spec, stdio)
	s := &supervisor{initLink: initLink{ctx: ctx}, host: p.h, spec: spec, io: stdio, policy: p.policy, timer: newStageTimer()}
	s.timer.stages["validate"] = p.checkTook.Seconds()
	s.report = &Report{BoxID: -1, BlockedSyscalls: []seccomp.Blocked{}, Sandbox: SandboxInfo{Image: spec.Image, Seccomp: policyName(spec), Limits: p.h.enforcement(spec), User: s.boxUser()}}
	err := s.openCopyDst()
	if err == nil {
		err = s.openBinds()
	}
	if err == nil {
		pool := p.h.pool.Load()
		if b := pool.claimAhead(s); b != nil {
			err = s.startClaimed(b)
		} else if b := pool.claim(p); b != nil {
			err = s.startClaimed(b)
		} else {
			err = s.build()
		}
	}
	if err == nil && p.h.rootless != nil {
		s.report.Sandbox.HostUID, s.report.Sandbox.HostGID = s.hostUID, s.hostGID
	}
	if err == nil {
		s.timer.markAt("start", s.execAt)
		s.report.Sandbox.SetupTime = s.execAt.Sub(s.timer.start).Seconds() + p.checkTook.Seconds()
		err = s.supervise()
	}
	teardownStart := time.Now()
	s.teardown()
	s.report.Sandbox.TeardownTime = time.Since(teardownStart).Seconds()
	s.report.Sandbox.Stages = s.timer.stages
	switch {
	case err != nil:
		s.report.Status, s.report.Message, s.report.Cause = StatusXX, err.Error(), err
	case s.interrupted != nil && s.report.Status != StatusXX:
		s.report.Status, s.report.Message, s.report.Cause = StatusXX, s.interrupted.Error(), s.interrupted
	}
	return s.report
}

// interruption is why ctx ended a run: "interrupted: " and its cause.
func interruption(ctx context.Context) error {
	return fmt.Errorf("interrupted: %w", context.Cause(ctx))
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

func appendMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// withDataCopies is spec with the copies stdio gives as data after its
// own (the prepared spec stays as it is).
func withDataCopies(spec *Spec, stdio IO) *Spec {
	if len(stdio.CopyIn) == 0 && len(stdio.CopyOut) == 0 {
		return spec
	}
	sp := *spec
	sp.CopyIn = append(append([]Copy(nil), spec.CopyIn...), stdio.CopyIn...)
	sp.CopyOut = append(append([]Copy(nil), spec.CopyOut...), stdio.CopyOut...)
	return &sp
}

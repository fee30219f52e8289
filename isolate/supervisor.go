package isolate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/rootfs"
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
	cg     *cgroup.Box
	policy *seccomp.Program
	initLink
	stdout  *capture
	stderr  *capture
	stdinW  *os.File   // the pipe a Reader given as stdin is copied into
	closers []*os.File // host ends to close once init has them
	// placement are the cgroup files through which the program joins the
	// box's cgroup; they reach init with the plan.
	placement  []*os.File
	notifySock int               // init's descriptor of the seccomp listener socket, or -1
	ownImage   *os.File          // the run's own image mount, until the box is planned
	cgroupDone chan cgroupResult // createCgroup's result, until awaitCgroup takes it
	notStarted *initMessage      // init's "exited" for a program that could not be started
	execAt     time.Time         // when the program's execve returned (or its start failed)
	boxPid     int               // the box's PID 1, in the host's PID namespace
	notify     *os.File          // socket on which the program sends its seccomp listener
	rec        *seccomp.Recorder
	// copyDst are the --copy-out destinations, their directories opened
	// with the caller's rights before the program starts.
	copyDst []*hostPath
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
}

// run performs one sandboxed run: take a box the pool built ahead, or
// build one (hold a box id, create the cgroup while init starts and
// builds the box), start the program, supervise, account, tear down. A
// failure of the sandbox itself is a report with status XX.
func run(ctx context.Context, p *Prepared, stdio IO) *Report {
	spec := p.spec
	s := &supervisor{initLink: initLink{ctx: ctx}, host: p.h, spec: spec, io: stdio, policy: p.policy, timer: newStageTimer()}
	s.timer.stages["validate"] = p.checkTook.Seconds()
	s.report = &Report{BoxID: -1, BlockedSyscalls: []seccomp.Blocked{}, Sandbox: SandboxInfo{Image: spec.Image, Seccomp: policyName(spec), Limits: p.h.enforcement(spec)}}
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

// build builds the run's box while it waits: hold a box id, create the
// cgroup while init starts and builds the box, start the program.
func (s *supervisor) build() error {
	if err := s.lockBox(); err != nil {
		return err
	}
	// The cgroup is created in the background while init starts and
	// creates the namespaces (about half a millisecond each).
	s.createCgroup()
	err := s.startInit()
	if err == nil {
		err = s.buildBox()
	}
	s.awaitCgroup() // on failure too: teardown removes what it made
	return err
}

// startClaimed starts the run's program in a box the pool built ahead
// (pool.go): the box takes the run's cgroup limits, files and streams,
// then its command.
func (s *supervisor) startClaimed(b *builtBox) error {
	a := b.s
	s.claimed = b.box
	s.lock, s.cg, s.placement, s.boxPid, s.notifySock = a.lock, a.cg, a.placement, a.boxPid, -1
	if s.policy != nil && s.policy.Notify {
		s.notify, s.notifySock = a.notify, a.notifySock
	} else {
		a.notify.Close()
	}
	s.initLink = initLink{ctx: s.ctx, init: a.init, ctl: a.ctl, msgs: a.msgs}
	b.box.link = &s.initLink
	s.report.BoxID = s.lock.id
	s.report.Sandbox.Cgroup = a.report.Sandbox.Cgroup
	s.timer.mark("claim")
	if s.cg == nil {
		// Built ahead for this box id (ahead.go): its cgroup is made
		// now, with the run's limits.
		s.createCgroup()
		if err := s.awaitCgroup(); err != nil {
			return err
		}
	} else if err := s.cg.SetLimits(s.limits()); err != nil {
		return fmt.Errorf("set the box's cgroup limits: %w", err)
	}
	s.timer.mark("cgroup-limits")
	stdin, stdout, stderr, err := s.stdio()
	if err != nil {
		return err
	}
	cmd := s.commandPlan()
	n := len(s.placement)
	files := append(append([]*os.File(nil), s.placement...), stdin, stdout, stderr)
	cmd.stdio(n, n+1, n+2)
	s.placeInCgroup(cmd)
	if len(s.spec.CopyIn) > 0 {
		if err := s.fill(); err != nil {
			return err
		}
	}
	s.timer.mark("plan")
	err = s.startProgram(b.box, cmd, files)
	closeAll(s.closers)
	s.closers = nil
	return err
}

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
		return fieldf("box_id", "%d is out of range (0-%d; num_boxes in %s raises it)", sp.BoxID, n-1, ConfigPath)
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
		if b.Box == "" || b.Box[0] != '/' || boxPath(b.Box) == "/" {
			return fieldf(fmt.Sprintf("binds[%d].box", i), "%s:%s: the box path must be absolute and not /", b.Host, b.Box)
		}
	}
	for i, c := range sp.CopyIn {
		if _, err := os.Stat(c.From); err != nil {
			return fieldf(fmt.Sprintf("copy_in[%d].from", i), "%s: %v", c.From, errors.Unwrap(err))
		}
	}
	for i, c := range sp.CopyOut {
		if _, err := os.Stat(dirOf(c.To)); err != nil {
			return fieldf(fmt.Sprintf("copy_out[%d].to", i), "%s: directory %s does not exist", c.To, dirOf(c.To))
		}
	}
	policy, err := p.h.policy(policyName(sp))
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
func (s *supervisor) caller() Cred { return credOf(s.spec.Caller) }

// openCopyDst opens the --copy-out destinations' directories with the
// caller's rights, before the program starts (it may replace them later).
func (s *supervisor) openCopyDst() error {
	return withFSThread(func(t *fsThread) error {
		for _, c := range s.spec.CopyOut {
			h, err := openHostPath(t, s.caller(), c.To)
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
		h.close()
	}
	s.copyDst = nil
}

func dirOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			if i == 0 {
				return "/"
			}
			return p[:i]
		}
	}
	return "."
}

// lockBox takes a box id.
func (s *supervisor) lockBox() error {
	var err error
	if s.lock, err = lockBox(s.host.lockDir(), s.spec.BoxID, s.host.numBoxes(), persistentIn(s.host.Config.BoxRoot)); err != nil {
		return err
	}
	s.report.BoxID = s.lock.id
	s.timer.mark("lock")
	return nil
}

// cgroupResult is what createCgroup's goroutine made.
type cgroupResult struct {
	mode      cgroup.Mode
	box       *cgroup.Box
	placement []*os.File
	took      time.Duration
	err       error
}

// createCgroup creates the box's cgroup and opens the files through which
// the program joins it, in a goroutine: see awaitCgroup.
func (s *supervisor) createCgroup() {
	done := make(chan cgroupResult, 1)
	s.cgroupDone = done
	id, host := s.lock.id, s.host
	limits := s.limits()
	if s.ahead {
		limits = cgroup.Limits{} // the command's, set when it claims the box
	}
	go func() {
		start := time.Now()
		r := cgroupResult{}
		defer func() { r.took = time.Since(start); done <- r }()
		mgr, err := host.Cgroups()
		if err != nil {
			r.err = fmt.Errorf("cgroups: %w", err)
			return
		}
		if mgr == nil { // rlimits alone (rootless.go)
			r.mode = "none"
			return
		}
		r.mode = mgr.Mode()
		if host.sweepDue(start) {
			sweepStale(mgr, host.lockDir(), id)
		}
		if r.box, r.err = mgr.Create(cgroupName(id), limits); r.err != nil {
			return
		}
		if r.placement, err = r.box.PlacementFiles(); err != nil {
			r.err = fmt.Errorf("open cgroup placement files: %w", err)
		}
	}()
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
	s.timer.mark("cgroup-wait")
	s.timer.stages["cgroup"] = r.took.Seconds()
	s.report.Sandbox.Cgroup = string(r.mode)
	s.cg, s.placement = r.box, r.placement
	return r.err
}

// startInit starts init, which clones the box's PID 1 into new
// namespaces and maps them; PID 1 then waits for the plan (see buildBox).
func (s *supervisor) startInit() error {
	// A socket, not a pipe: the cgroup files, created meanwhile, travel
	// with the plan.
	ctl, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("create the control socket: %w", err)
	}
	s.ctl = os.NewFile(uintptr(ctl[0]), "init-control")
	ctlInit := os.NewFile(uintptr(ctl[1]), "init-control")
	statusW, statusR, err := boxPipe(false)
	if err != nil {
		ctlInit.Close()
		return err
	}
	s.closers = append(s.closers, ctlInit, statusW)
	extra := []*os.File{ctlInit, statusW}
	s.notifySock = -1
	// A box built ahead has the listener's socket whatever its command's
	// policy turns out to be.
	if s.ahead || (s.policy != nil && s.policy.Notify) {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("create seccomp listener socket: %w", err)
		}
		s.notify = os.NewFile(uintptr(pair[0]), "seccomp-listener")
		theirs := os.NewFile(uintptr(pair[1]), "seccomp-listener")
		s.notifySock = fdControl + len(extra)
		extra = append(extra, theirs)
		s.closers = append(s.closers, theirs)
	}
	if m, err := s.mountImage(); err != nil {
		return err
	} else if m != nil {
		s.image, s.imageInInit = m.Path(), "/proc/self/fd/"+strconv.Itoa(fdControl+len(extra))
		extra = append(extra, m.File())
	}
	if m := s.spec.BoxMount; m != nil && m.Dir() != "" {
		s.boxInInit = m.Dir() // without root: a directory (rootless.go)
	} else if m != nil {
		s.boxInInit = "/proc/self/fd/" + strconv.Itoa(fdControl+len(extra))
		extra = append(extra, m.File())
	}
	for _, b := range s.binds {
		if b != nil && b.tree != nil {
			b.initFD = fdControl + len(extra)
			extra = append(extra, b.tree)
		}
	}
	stdin, stdout, stderr, err := s.stdio()
	if err != nil {
		return err
	}
	flags := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS)
	if !s.spec.HostNet {
		flags |= syscall.CLONE_NEWNET
	}
	files := []uintptr{stdin.Fd(), stdout.Fd(), stderr.Fd()}
	for _, f := range extra {
		files = append(files, f.Fd())
	}
	// syscall.ForkExec, not os/exec: os/exec probes pidfd support with a
	// throwaway fork in every new process, a cost on every run. No clone
	// flags: init creates the namespaces itself (see init.c), so Go can
	// start it with vfork instead of copying the supervisor.
	pidfd := -1
	attr := &syscall.ProcAttr{
		Env:   initEnv(),
		Files: files,
		Sys: &syscall.SysProcAttr{
			// The box dies with the supervisor, however the supervisor dies.
			Pdeathsig: syscall.SIGKILL,
			PidFD:     &pidfd,
		},
	}
	if s.host.rootless == nil { // (a user's own exists: rootless.go)
		if err := os.MkdirAll(rootfs.StagingDir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", rootfs.StagingDir, err)
		}
	}
	s.timer.mark("spawn-prep")
	argv := s.host.appendInitMaps(append(make([]string, 0, 5), "isolate-init", InitArg, strconv.FormatUint(uint64(flags), 10)), s.lock.id)
	pid, err := forkInitExe(argv, attr)
	if err != nil {
		return fmt.Errorf("start init: %w", err)
	}
	s.init = &initProc{pid: pid, pidfd: pidfd}
	s.timer.mark("spawn")
	closeAll(s.closers)
	s.closers = nil
	s.msgs = make(chan initMessage, 4)
	go readMessages(statusR, s.msgs)
	return nil
}

// buildBox sends init the plan of the box: the box part at once (PID 1
// builds it while the cgroup is made), the command part, which holds the
// cgroup files, once the cgroup is made. With --copy-in the box is filled
// in between. Then it waits for the program to start.
func (s *supervisor) buildBox() error {
	fillFirst := len(s.spec.CopyIn) > 0
	boxPart, err := s.boxPlan(fillFirst)
	if err != nil {
		return err
	}
	box, err := s.startBox(boxPart)
	if s.ownImage != nil {
		s.ownImage.Close()
		s.ownImage = nil
	}
	if err != nil {
		return err
	}
	s.timer.mark("plan")
	cmd := s.commandPlan()
	if err := s.awaitCgroup(); err != nil {
		return err
	}
	s.placeInCgroup(cmd)
	if fillFirst {
		if s.boxPid, err = box.ready(); err != nil {
			return err
		}
		s.timer.mark("namespaces+fs")
		if err := s.fill(); err != nil {
			return err
		}
	}
	return s.startProgram(box, cmd, s.placement)
}

// startProgram sends the command part with files and waits until the
// program runs (or could not be started).
func (s *supervisor) startProgram(box *pendingBox, cmd *plan, files []*os.File) error {
	// The run's goroutines made ready meanwhile (output captures, init's
	// reader) run to their first wait now: after the command they would
	// hold this thread's CPU while init, woken onto it, waits.
	runtime.Gosched()
	sent := time.Now()
	m, err := box.start(cmd, files)
	s.execAt = execTime(&m, sent)
	if s.claimed == nil {
		// (A claimed box's end closes them, off the run's path.)
		closeAll(s.placement)
		s.placement = nil
	}
	if err != nil {
		return err
	}
	s.boxPid = m.Pid
	if m.Type == msgExited {
		// It could not even be started: keep the message for supervise
		// (init may be gone already, its channel closed).
		s.notStarted = &m
		return nil
	}
	for k, v := range m.Stages {
		// A box built ahead waited between init's other stages.
		if s.claimed == nil || k == "init-exec" {
			s.timer.stages[k] = time.Duration(v).Seconds()
		}
	}
	if s.notify != nil {
		fd, err := receiveFD(s.notify)
		if err != nil {
			return fmt.Errorf("receive the seccomp listener: %w", err)
		}
		s.rec = seccomp.NewRecorder(fd)
		s.rec.Start()
	}
	return nil
}

// execTime is when init saw the program's execve return: m says so on
// the host's CLOCK_MONOTONIC, which Go's clock reads too but does not
// show. Init tells a start late; without a time (a program that could not
// be started), now. Never before the command was sent.
func execTime(m *initMessage, sent time.Time) time.Time {
	now := time.Now()
	var ts unix.Timespec
	if m.ExecNs <= 0 || unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return now
	}
	at := now.Add(-time.Duration(ts.Nano() - m.ExecNs))
	if at.Before(sent) {
		return sent
	}
	if at.After(now) {
		return now
	}
	return at
}

// mountImage mounts the run's squashfs image, or takes the one the caller
// shares; nil for a directory image. A mount of the run's own is closed
// once init holds it and the box is planned.
func (s *supervisor) mountImage() (*rootfs.Mounted, error) {
	if s.spec.ImageMount != nil {
		return s.spec.ImageMount, nil
	}
	if s.spec.ImageFile == "" {
		return nil, nil
	}
	m, err := rootfs.MountSquashfs(s.spec.ImageFile)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	// Open until the box is planned: the plan reads the image's tree
	// through it.
	s.ownImage = m.File()
	s.timer.mark("image-mount")
	return m, nil
}

// initProc is the box's init, a child of the supervisor.
type initProc struct {
	pid    int
	pidfd  int // signals go through it: never to a recycled pid
	once   sync.Once
	status syscall.WaitStatus
}

// wait reaps init (once) and returns its wait status.
func (p *initProc) wait() syscall.WaitStatus {
	p.once.Do(func() {
		for {
			_, err := syscall.Wait4(p.pid, &p.status, 0, nil)
			if err != syscall.EINTR {
				return
			}
		}
	})
	return p.status
}

// oneShot is set by a process that runs its boxes and then exits (the
// CLI): none of its goroutines ends locked to its thread while a box
// lives, so init may be forked from whatever thread runs the run, and no
// thread is held for the parent-death signal (see forkInit).
var oneShot atomic.Bool

// OneShotProcess declares the calling process one-shot (see oneShot). A
// long-running process (the service) must not.
func OneShotProcess() { oneShot.Store(true) }

// forkInit starts init. The parent-death signal fires when the thread
// that forked exits, not the process, and Go ends a thread when a
// goroutine exits locked to it: so in a long-running process (a service
// runs boxes for hours beside code that locks threads to change
// credentials) init is forked from one of a few "forker" goroutines, each
// locked to its thread for the life of the process (they never unlock,
// never exit). The parent-death signal then fires when the process dies,
// for every box at once, and never before. (Before them, each box held a
// new locked thread while it lived: 1.1 ms of every run's start.)
func forkInit(path string, argv []string, attr *syscall.ProcAttr) (pid int, err error) {
	if oneShot.Load() {
		return syscall.ForkExec(path, argv, attr)
	}
	forkersOnce.Do(startForkers)
	req := forkRequest{path: path, argv: argv, attr: attr, done: make(chan forkResult, 1)}
	forkRequests <- req
	r := <-req.done
	return r.pid, r.err
}

// numForkers is how many threads fork inits: a fork is short (vfork until
// the exec), so two keep a service's concurrent starts from queueing.
const numForkers = 2

type forkRequest struct {
	path string
	argv []string
	attr *syscall.ProcAttr
	done chan forkResult
}

type forkResult struct {
	pid int
	err error
}

var (
	forkersOnce  sync.Once
	forkRequests = make(chan forkRequest)
)

func startForkers() {
	for i := 0; i < numForkers; i++ {
		go func() {
			runtime.LockOSThread() // for good: see forkInit
			for req := range forkRequests {
				pid, err := syscall.ForkExec(req.path, req.argv, req.attr)
				req.done <- forkResult{pid, err}
			}
		}()
	}
}

func (p *initProc) kill() { unix.PidfdSendSignal(p.pidfd, unix.SIGKILL, nil, 0) }

// alive tells whether init still runs: its pidfd turns readable when it
// ends (a zombie too).
func (p *initProc) alive() bool {
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

func (p *initProc) close() { unix.Close(p.pidfd) }

func describeWait(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by signal " + ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

// idMaps is the text of the uid_map and gid_map of a box's user
// namespace, which init writes: its root is root outside, for init alone;
// the program runs as boxUID, which is hostUID outside, an unprivileged
// uid of this box.
func idMaps(hostUID int) string { return fmt.Sprintf("0 0 1\n%d %d 1\n", boxUID, hostUID) }

// receiveFD takes the descriptor the program sent before its exec.
func receiveFD(sock *os.File) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(int(sock.Fd()), buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("no descriptor in the message (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("no descriptor in the message (%v)", err)
	}
	return fds[0], nil
}

// initEnv is init's own environment: nothing of the caller's.
func initEnv() []string { return []string{} }

// boxPlan is the box part of init's plan: the namespaces' settings and
// the file system. With announce, init says when the box is built.
func (s *supervisor) boxPlan(announce bool) (*plan, error) {
	sp := s.spec
	p := &plan{}
	p.hostname("isolate")
	if !sp.HostNet {
		p.loopback()
	}
	// With no capabilities the program can only create namespaces by
	// first creating a user namespace; forbid that outright, whatever
	// clone flags a syscall filter can or cannot see.
	p.sysctl("forbid nested user namespaces", "/proc/sys/user/max_user_namespaces", "0")
	layout := rootfs.Layout{
		Image:       sp.ImageDir,
		ImageSource: s.imageInInit,
		TmpSize:     sp.TmpSize,
		UID:         boxUID,
		GID:         boxUID,
		BoxDir:      sp.BoxDir,
		HostNet:     sp.HostNet,
		Staging:     s.host.stagingDir(),
	}
	for i, b := range sp.Binds {
		bind := rootfs.Bind{Host: b.Host, Box: boxPath(b.Box), Writable: b.Writable,
			Dev: b.Dev, NoExec: b.NoExec, NoRec: b.NoRec, Optional: b.Optional, FS: b.FS}
		if i < len(s.binds) && s.binds[i] != nil {
			bind.Opened = &rootfs.OpenedSource{Tree: s.binds[i].initFD, Dir: s.binds[i].dir, Path: s.binds[i].path}
		}
		layout.Binds = append(layout.Binds, bind)
	}
	if s.image != "" {
		layout.Image = s.image
	}
	if s.boxInInit != "" {
		layout.BoxDir = s.boxInInit
	}
	ops, err := rootfs.Plan(&layout)
	if err != nil {
		return nil, fmt.Errorf("plan the box file system: %w", err)
	}
	p.fs(ops)
	if s.ahead && s.policy != nil && s.policy.Filter != nil {
		// The filter the pool expects its boxes' commands to have (the
		// default): a command with another one gets a fresh process.
		p.prepare(s.policy.Filter, s.policy.Notify)
	}
	if s.session {
		p.session()
	}
	p.boxEnd(announce)
	return p, nil
}

// commandPlan is the command part of init's plan, but for the cgroup:
// the program and how to start it.
func (s *supervisor) commandPlan() *plan {
	sp := s.spec
	p := &plan{}
	p.argv(sp.Command)
	env := sp.Env
	if env == nil {
		env = BaseEnv
	}
	p.env(env)
	dir := sp.Chdir
	if dir == "" {
		dir = "/box"
	}
	p.dir(dir)
	p.cred(boxUID, boxUID)
	rl := func(res int, v int64) {
		if v > 0 {
			p.rlimit(res, uint64(v))
		}
	}
	rl(unix.RLIMIT_FSIZE, sp.FileSize)
	rl(unix.RLIMIT_NOFILE, sp.OpenFiles)
	rl(unix.RLIMIT_STACK, sp.Stack)
	rl(unix.RLIMIT_AS, sp.AddrSpace)
	if sp.CPUTime > 0 {
		// A backstop only: the supervisor kills at the exact limit.
		rl(unix.RLIMIT_CPU, int64((sp.CPUTime+sp.ExtraTime)/time.Second)+2)
	}
	if s.host.rlimitsOnly() {
		s.rlimitsForCgroup(rl)
	}
	if s.policy != nil && s.policy.Filter != nil {
		p.seccomp(s.policy.Filter, s.notifySock)
	}
	if sp.StderrToStdout {
		p.stderrToStdout()
	}
	// Init keeps the box for copy-out, or while its end waits for the
	// caller (EndAfter): its exit is most of that end.
	if len(sp.CopyOut) > 0 || (s.claimed != nil && endAfter(s.ctx) != nil) {
		p.hold()
	}
	// Init tells a program's start up to 10 ms late (init_main.c), and
	// the limits count from it once told: a limit that short could be
	// overrun by the wait.
	if sp.effectiveWall() < shortLimit || (sp.CPUTime > 0 && s.cpuTimeToLimit() < shortLimit) {
		p.tellStart()
	}
	return p
}

// shortLimit is a wall time or CPU budget under which init tells the
// program's start at once: ten times its delay.
const shortLimit = 100 * time.Millisecond

// cpusUsable is how many CPUs the program may keep busy at once.
func (s *supervisor) cpusUsable() float64 {
	cpus := float64(NumCPU())
	if s.spec.CPUs > 0 && s.spec.CPUs < cpus {
		cpus = s.spec.CPUs
	}
	return cpus
}

// cpuTimeToLimit is the least wall time in which the program can spend
// its CPU budget: every CPU it may use busy.
func (s *supervisor) cpuTimeToLimit() time.Duration {
	return time.Duration(float64(s.spec.CPUTime+s.spec.ExtraTime) / s.cpusUsable())
}

// placeInCgroup ends the command part: the program joins the box's
// cgroup through the files (s.placement) sent with it.
func (s *supervisor) placeInCgroup(p *plan) {
	for i := range s.placement {
		if s.cg.ForkInto() {
			p.cgroupFork(i)
		} else {
			p.cgroupTasks(i)
		}
	}
	p.end()
}

// stdio gives the program its standard streams from s.io, under IO's
// rule: files as they are, other Readers and Writers through pipes.
func (s *supervisor) stdio() (stdin, stdout, stderr *os.File, err error) {
	if s.ahead {
		// A box built ahead has no streams yet: its command brings them
		// (plan.stdio).
		null, err := devNull(unix.O_RDWR)
		if err != nil {
			return nil, nil, nil, err
		}
		s.closers = append(s.closers, null)
		return null, null, null, nil
	}
	switch in := s.io.Stdin.(type) {
	case nil:
		if stdin, err = devNull(unix.O_RDONLY); err != nil {
			return nil, nil, nil, fmt.Errorf("open stdin: %w", err)
		}
		s.closers = append(s.closers, stdin)
	case *os.File:
		stdin = in
	default:
		r, w, err := boxPipe(true)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("stdin pipe: %w", err)
		}
		s.closers = append(s.closers, r)
		s.stdinW = w
		go func() {
			io.Copy(w, in)
			w.Close()
		}()
		stdin = r
	}
	output := func(out interface{ Write([]byte) (int, error) }) (*os.File, *capture, error) {
		if f, ok := out.(*os.File); ok {
			return f, nil, nil
		}
		w, r, err := boxPipe(false)
		if err != nil {
			return nil, nil, err
		}
		s.closers = append(s.closers, w)
		return w, startCapture(r, s.spec.OutputLimit, out), nil
	}
	if stdout, s.stdout, err = output(s.io.Stdout); err != nil {
		return nil, nil, nil, fmt.Errorf("stdout pipe: %w", err)
	}
	if s.spec.StderrToStdout {
		return stdin, stdout, stdout, nil
	}
	if stderr, s.stderr, err = output(s.io.Stderr); err != nil {
		return nil, nil, nil, fmt.Errorf("stderr pipe: %w", err)
	}
	return stdin, stdout, stderr, nil
}

// interruption is why ctx ended a run: "interrupted: " and its cause.
func interruption(ctx context.Context) error {
	return fmt.Errorf("interrupted: %w", context.Cause(ctx))
}

// openBoxRoot opens the box's root directory, through its PID 1.
func (s *supervisor) openBoxRoot() (int, error) {
	if s.boxPid <= 0 {
		return -1, errors.New("init did not say where the box is")
	}
	return unix.Open("/proc/"+strconv.Itoa(s.boxPid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// fill copies the --copy-in files into the box, through init's root.
func (s *supervisor) fill() error {
	root, err := s.openBoxRoot()
	if err != nil {
		return fmt.Errorf("open the box root: %w", err)
	}
	defer unix.Close(root)
	err = withFSThread(func(t *fsThread) error {
		for _, c := range s.spec.CopyIn {
			if err := copyIn(t, root, c, s.caller(), s.boxCred()); err != nil {
				return fmt.Errorf("--copy-in %s: %w", c.From, err)
			}
		}
		return nil
	})
	s.timer.mark("copy-in")
	return err
}

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
			if m.Type == msgExited {
				exited = &m
			} else if m.Type == msgError {
				return fmt.Errorf("box init failed: %w", m.stepError())
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
			s.init.kill()
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
	s.ctl.Write([]byte{ctlKill})
}

// account fills the report from the kernel's figures: the cgroup for CPU,
// memory and tasks, init's wait4 for the exit and rusage.
func (s *supervisor) account(m *initMessage, wall time.Duration) error {
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
	switch {
	case ws.Signaled():
		r.Signal = int(ws.Signal())
		r.ExitCode = 128 + r.Signal
	default:
		r.ExitCode = ws.ExitStatus()
	}
	overCPU := sp.CPUTime > 0 && (total > sp.CPUTime || s.hitRlimitCPU(ws))
	s.wallKillOverCPU(total)
	switch {
	case r.StartFailure != nil && r.StartFailure.Step != "execve":
		// A step of the sandbox's own before the program's execve failed
		// (its working directory, credentials, limits, filter): that is
		// the sandbox failing, not the program. A program that is not
		// there stays RE 127, as a shell says it.
		r.Status, r.Cause = StatusXX, r.StartFailure
	case r.Killed && r.Limit == LimitMemory:
		// Not the OOM killer: the sandbox ended a box stuck at its limit
		// (thrash.go). oom_killed says which.
		r.Status = StatusML
		r.Message = "memory limit exceeded: killed by the sandbox, stuck reclaiming its own pages at the limit"
		if r.OOMKilled {
			r.Message = "memory limit exceeded"
		}
	case r.Killed:
		r.Status = StatusTO
		if r.Limit == LimitCPU {
			r.Message = "CPU time limit exceeded"
		} else {
			r.Message = "wall time limit exceeded"
		}
	case r.OOMKilled:
		r.Status = StatusML
		r.Message = "memory limit exceeded"
	case overCPU:
		r.Status, r.Limit, r.Message = StatusTO, LimitCPU, "CPU time limit exceeded"
	case ws.Signaled():
		r.Status = StatusSG
		if r.Message == "" {
			r.Message = "caught signal " + strconv.Itoa(r.Signal)
		}
	case r.ExitCode != 0:
		r.Status = StatusRE
		if r.Message == "" {
			r.Message = "exited with status " + strconv.Itoa(r.ExitCode)
		}
	default:
		r.Status = StatusOK
	}
	return nil
}

// cgroupUsage reads what the box used from its cgroup into the report:
// CPU time (the total, and the user/system split to apply to it),
// memory peak, OOM kills, pids peak.
func (s *supervisor) cgroupUsage(m *initMessage) (total, user, sys time.Duration, err error) {
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

// teardown copies files out, lets init exit (the kernel then drops the
// namespaces and every mount), removes the cgroup and frees the box id.
//
// A box the pool built ahead never gave init the program's streams: once
// init has reported the program's exit, the output is complete, and the
// box ends in the background, off the caller's path (pool.go).
func (s *supervisor) teardown() {
	closeAll(s.closers)
	if s.ownImage != nil {
		s.ownImage.Close()
	}
	accounted := s.report.Status != ""
	pool := s.host.pool.Load()
	// The next box of a persistent box id is built once this one has
	// ended (ahead.go).
	next := pool.aheadFor(s)
	if s.claimed != nil && accounted && s.init != nil {
		if len(s.spec.CopyOut) > 0 {
			s.copyOut()
		}
		s.collect()
		s.timer.mark("collect")
		end := s.detachBox()
		switch {
		case next != nil && pool.startAhead(next, end, endAfter(s.ctx)):
		case s.spec.BoxID >= 0:
			// The id's next run must find it free: no box was built
			// ahead for it to wait for.
			reportEnd(end())
		default:
			pool.endInBackground(end, endAfter(s.ctx))
		}
		return
	}
	closeAll(s.placement)
	// Once init has reported the program's exit, it has reaped every
	// process of the box: the cgroup goes while init ends.
	if accounted {
		s.removeCgroup()
	}
	if s.init != nil && len(s.spec.CopyOut) > 0 && accounted {
		s.copyOut()
	}
	s.endInit()
	s.collect()
	s.timer.mark("wait-init")
	s.removeCgroup()
	if s.lock != nil {
		s.lock.release()
	}
	if next != nil {
		pool.startAhead(next, nil, endAfter(s.ctx))
	}
}

// endInit closes init's control socket, which ends init, and reaps it
// (killing it if it does not end in time).
func (s *supervisor) endInit() {
	if s.ctl != nil {
		s.ctl.Close()
	}
	if s.init == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(killGrace):
			s.init.kill()
		}
	}()
	s.init.wait()
	close(done)
	s.init.close()
	// Init is gone: its status pipe ends, and readMessages closes it and
	// then the channel. Waiting for that leaves no descriptor of the run
	// open after it.
	if s.msgs != nil {
		for range s.msgs {
		}
	}
}

// detachBox hands what is left of the box (init, its cgroup, the box id)
// to the returned function, which ends it: the report no longer changes.
func (s *supervisor) detachBox() func() error {
	end := &supervisor{host: s.host, spec: s.spec, initLink: s.initLink, cg: s.cg, lock: s.lock, placement: s.placement, timer: newStageTimer(), report: &Report{}}
	s.init, s.ctl, s.cg, s.lock, s.placement = nil, nil, nil, nil, nil
	return func() error {
		closeAll(end.placement)
		var err error
		if end.cg != nil {
			err = end.cg.Destroy()
		}
		end.endInit()
		if end.lock != nil {
			end.lock.release()
		}
		return err
	}
}

// collect takes what the report still needs once the program is gone:
// blocked syscalls, captured output.
func (s *supervisor) collect() {
	s.closeCopyDst()
	s.closeBinds()
	if s.rec != nil {
		s.report.BlockedSyscalls = s.rec.Stop()
	}
	if s.notify != nil {
		s.notify.Close()
	}
	if s.stdinW != nil {
		s.stdinW.Close() // ends a copy the program did not read to its end
	}
	if s.stdout != nil {
		s.report.Stdout, s.report.StdoutTruncated = s.stdout.result()
	}
	if s.stderr != nil {
		s.report.Stderr, s.report.StderrTruncated = s.stderr.result()
	}
}

// removeCgroup removes the box's cgroup (once), killing anything left in
// it.
func (s *supervisor) removeCgroup() {
	if s.cg == nil {
		return
	}
	if err := s.cg.Destroy(); err != nil && s.report.Status != StatusXX {
		s.report.Status = StatusXX
		s.report.Message = "teardown: " + err.Error()
	}
	s.cg = nil
	s.timer.mark("cgroup-remove")
}

// copyOut copies the --copy-out files to the host, within the run's
// bounds. A copy that fails makes an OK run XX (copyOutFailed): its
// files are missing or partial.
func (s *supervisor) copyOut() {
	root, err := s.openBoxRoot()
	if err != nil {
		s.copyOutFailed(fmt.Errorf("--copy-out: %w", err))
		return
	}
	budget := copyOutBudget(s.spec)
	done := goFSThread(func(t *fsThread) error {
		defer unix.Close(root)
		var failed []string
		for i, c := range s.spec.CopyOut {
			if err := copyOut(t, root, c, s.copyDst[i], s.boxCred(), s.caller(), budget); err != nil {
				failed = append(failed, "--copy-out "+c.From+": "+err.Error())
			}
		}
		if len(failed) > 0 {
			return errors.New(strings.Join(failed, "; "))
		}
		return nil
	})
	// The budget's deadline stops a slow copy between reads; this one a
	// read that never returns (the box's descriptors die with init).
	timeout := time.NewTimer(copyTimeout + killGrace)
	defer timeout.Stop()
	select {
	case err = <-done:
	case <-timeout.C:
		err = fmt.Errorf("--copy-out did not finish within %v", copyTimeout+killGrace)
	}
	if err != nil {
		s.copyOutFailed(err)
	}
}

// copyOutFailed records a failed copy-out. A run that was OK becomes XX:
// what the caller asked for is missing. A run that already failed keeps
// its verdict (a program that timed out or crashed often leaves no
// output file; that is not the sandbox failing), and the message says
// both.
func (s *supervisor) copyOutFailed(err error) {
	if s.report.Status == StatusOK {
		s.report.Status = StatusXX
	}
	if s.report.Message == "" {
		s.report.Message = err.Error()
	} else {
		s.report.Message = appendMsg(err.Error(), "the program: "+s.report.Message)
	}
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

// startFailure is the step that kept the program from starting, as init
// sent it: the step ("execve" for the program's own exec), its errno, and
// the text after "PROGRAM: " or "STEP: ".
func startFailure(program string, m *initMessage) *StepError {
	prefix := m.Step + ": "
	if m.Step == "execve" {
		prefix = program + ": "
	}
	return &StepError{Step: m.Step, Errno: m.Errno, Msg: strings.TrimPrefix(m.ExecErr, prefix)}
}

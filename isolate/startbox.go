package isolate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
	"github.com/isolate-sandbox/isolate/isolate/egress"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/seccomp"
)

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
	s.netns, a.netns = a.netns, nil
	// The box user is the one the box was built with.
	s.hostUID, s.hostGID, s.report.Sandbox.User = a.hostUID, a.hostGID, a.boxUser()
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
		// Built ahead for this box id (pool_ahead.go): its cgroup is made
		// now, with the run's limits.
		if err := s.createCgroupNow(); err != nil {
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
	cmd.Stdio(n, n+1, n+2)
	s.placeInCgroup(cmd)
	if len(s.spec.CopyIn) > 0 {
		if err := s.fill(); err != nil {
			return err
		}
	}
	if err := s.startEgress(); err != nil {
		return err
	}
	s.timer.mark("plan")
	err = s.startProgram(b.box, cmd, files)
	closeAll(s.closers)
	s.closers = nil
	if err == nil {
		// The id's next box is built while this one runs.
		s.next = s.host.pool.Load().buildNext(s)
	}
	return err
}

// startInit starts init, which clones the box's PID 1 into new
// namespaces and maps them; PID 1 then waits for the plan (see buildBox).
func (s *supervisor) startInit() error {
	flags := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS)
	netns := -1
	if s.netns != nil {
		netns = s.netns.fd()
	} else if !s.spec.HostNet {
		flags |= syscall.CLONE_NEWNET
	}
	early := s.earlyInitFor(flags)
	// extra are init's descriptors from boxinit.FDControl on.
	var extra []*os.File
	var statusR *os.File
	if early != nil {
		s.ctl, statusR = early.ctl, early.status
		extra = []*os.File{nil, nil} // (the early init has them)
	} else {
		// A socket, not a pipe: the cgroup files, created meanwhile,
		// travel with the plan.
		ctl, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("create the control socket: %w", err)
		}
		s.ctl = os.NewFile(uintptr(ctl[0]), "init-control")
		ctlInit := os.NewFile(uintptr(ctl[1]), "init-control")
		var statusW *os.File
		if statusW, statusR, err = boxPipe(false); err != nil {
			ctlInit.Close()
			return err
		}
		s.closers = append(s.closers, ctlInit, statusW)
		extra = []*os.File{ctlInit, statusW}
	}
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
		s.notifySock = boxinit.FDControl + len(extra)
		extra = append(extra, theirs)
		s.closers = append(s.closers, theirs)
	}
	if m, err := s.mountImage(); err != nil {
		return err
	} else if m != nil {
		s.image, s.imageInInit = m.Path(), "/proc/self/fd/"+strconv.Itoa(boxinit.FDControl+len(extra))
		extra = append(extra, m.File())
	}
	if m := s.spec.BoxMount; m != nil && m.Dir() != "" {
		s.boxInInit = m.Dir() // without root: a directory (rootless.go)
	} else if m != nil {
		s.boxInInit = "/proc/self/fd/" + strconv.Itoa(boxinit.FDControl+len(extra))
		extra = append(extra, m.File())
	}
	idmap, err := s.bindIDMap()
	if err != nil {
		return err
	}
	if idmap != nil {
		defer idmap.Close()
	}
	for _, b := range s.binds {
		if b == nil {
			continue
		}
		if err := b.Clone(idmap); err != nil {
			return fmt.Errorf("bind %s: %w", b.Source.Name(), err)
		}
		if b.Tree != nil {
			b.initFD = boxinit.FDControl + len(extra)
			extra = append(extra, b.Tree)
		}
	}
	stdin, stdout, stderr, err := s.stdio()
	if err != nil {
		return err
	}
	if early != nil {
		return s.adoptInit(early, extra[2:], []*os.File{stdin, stdout, stderr}, statusR)
	}
	files := []uintptr{stdin.Fd(), stdout.Fd(), stderr.Fd()}
	for _, f := range extra {
		files = append(files, f.Fd())
	}
	// syscall.ForkExec, not os/exec: os/exec probes pidfd support with a
	// throwaway fork in every new process, a cost on every run. No clone
	// flags: init creates the namespaces itself (see boxinit/init_main.c), so Go can
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
	if err := s.makeStaging(); err != nil {
		return err
	}
	s.timer.mark("spawn-prep")
	argv := s.appendInitMaps(append(make([]string, 0, 7), "isolate-init", boxinit.InitArg, strconv.FormatUint(uint64(flags), 10)))
	pid, err := forkInitExe(argv, attr, netns)
	if err != nil {
		return fmt.Errorf("start init: %w", err)
	}
	s.init = &boxinit.Proc{Pid: pid, Pidfd: pidfd}
	s.timer.mark("spawn")
	closeAll(s.closers)
	s.closers = nil
	s.msgs = make(chan boxinit.Message, 4)
	go readMessages(statusR, s.msgs)
	return nil
}

// makeStaging makes the directory where init builds the box's root.
func (s *supervisor) makeStaging() error {
	if s.host.rootless == nil { // (a user's own exists: rootless.go)
		if err := os.MkdirAll(rootfs.StagingDir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", rootfs.StagingDir, err)
		}
	}
	return nil
}

// startBoxPart sends init the box part of the plan, then lets go of the
// run's own image mount: init holds it from then on.
func (s *supervisor) startBoxPart(part *boxinit.Plan) (*pendingBox, error) {
	box, err := s.startBox(part, s.boxFiles)
	if s.ownImage != nil {
		s.ownImage.Close()
		s.ownImage = nil
	}
	return box, err
}

// buildBox sends init the plan of the box: the box part at once (PID 1
// builds it while the cgroup is made), the command part, which holds the
// cgroup files, once the cgroup is made. With --copy-in the box is filled
// in between. Then it waits for the program to start.
func (s *supervisor) buildBox() error {
	// The box is filled, and its allowlist's proxy made, once it is
	// built and before the program starts.
	fillFirst := len(s.spec.CopyIn) > 0 || s.spec.Egress != nil
	boxPart, err := s.boxPlan(fillFirst)
	if err != nil {
		return err
	}
	box, err := s.startBoxPart(boxPart)
	if err != nil {
		return err
	}
	s.timer.mark("plan")
	cmd := s.commandPlan()
	if err := s.awaitCgroup(); err != nil {
		return err
	}
	files := s.placement
	if s.streams != nil {
		n := len(files)
		files = append(append(make([]*os.File, 0, n+3), files...), s.streams...)
		cmd.Stdio(n, n+1, n+2)
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
		if err := s.startEgress(); err != nil {
			return err
		}
	}
	err = s.startProgram(box, cmd, files)
	if s.streams != nil {
		// (An early init's: they went with the plan.)
		closeAll(s.closers)
		s.closers = nil
	}
	return err
}

// startProgram sends the command part with files and waits until the
// program runs (or could not be started).
func (s *supervisor) startProgram(box *pendingBox, cmd *boxinit.Plan, files []*os.File) error {
	if s.io.BeforeStart != nil {
		s.io.BeforeStart()
		s.timer.mark("before-start")
	}
	// The run's goroutines made ready meanwhile (output captures, init's
	// reader) run to their first wait now: after the command they would
	// hold this thread's CPU while init, woken onto it, waits.
	runtime.Gosched()
	sent := time.Now()
	m, err := box.start(cmd, files)
	s.execAt = boxinit.ExecTime(&m, sent)
	if s.claimed == nil {
		// (A claimed box's end closes them, off the run's path.)
		closeAll(s.placement)
		s.placement = nil
	}
	if err != nil {
		return err
	}
	s.boxPid = m.Pid
	if m.Type == boxinit.MsgExited {
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
		fd, err := receiveFD(int(s.notify.Fd()), unix.MSG_DONTWAIT)
		if err != nil {
			return fmt.Errorf("receive the seccomp listener: %w", err)
		}
		s.rec = seccomp.NewRecorder(fd)
		s.rec.Start()
	}
	return nil
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

// idMaps is the text of the uid_map and gid_map of a box's user
// namespace, which init writes: its root is root outside, for init alone;
// the program runs as boxUID, which is hostUID outside, an unprivileged
// uid of this box.
func idMaps(hostUID int) string { return fmt.Sprintf("0 0 1\n%d %d 1\n", boxUID, hostUID) }

// receiveFD takes the one descriptor a message on sock carries (flags:
// recvmsg's, MSG_CMSG_CLOEXEC added).
func receiveFD(sock int, flags int) (int, error) {
	var buf [1]byte
	oob := make([]byte, unix.CmsgSpace(4))
	var oobn int
	var err error
	for {
		if _, oobn, _, _, err = unix.Recvmsg(sock, buf[:], oob, flags|unix.MSG_CMSG_CLOEXEC); err != unix.EINTR {
			break
		}
	}
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
func (s *supervisor) boxPlan(announce bool) (*boxinit.Plan, error) {
	sp := s.spec
	// Room for a usual box part (about 5 KiB): growing it by doubling
	// touches pages twice over.
	p := &boxinit.Plan{Buf: make([]byte, 0, 8<<10)}
	for i := range s.boxFiles {
		p.PlaceFD(boxinit.FDExtra + i)
	}
	p.Hostname("isolate")
	if !sp.HostNet {
		if s.netns == nil { // (a kept one's is up, and not the box's to set)
			p.Loopback()
		}
		if sp.Egress != nil {
			p.Listen(egress.Port)
		}
	}
	// With no capabilities the program can only create namespaces by
	// first creating a user namespace; forbid that outright, whatever
	// clone flags a syscall filter can or cannot see.
	p.Sysctl("forbid nested user namespaces", "/proc/sys/user/max_user_namespaces", "0")
	layout := rootfs.Layout{
		Image:       sp.ImageDir,
		ImageSource: s.imageInInit,
		TmpSize:     sp.TmpSize,
		UID:         boxUID,
		GID:         boxUID,
		BoxDir:      sp.BoxDir,
		HostNet:     sp.HostNet,
		Staging:     s.host.stagingDir(),
		HandOver:    s.subIDs() != nil,
	}
	for i, b := range sp.Binds {
		bind := rootfs.Bind{Host: b.Host, Box: hostfs.BoxPath(b.Box), Writable: b.Writable,
			Dev: b.Dev, NoExec: b.NoExec, NoRec: b.NoRec, Optional: b.Optional, FS: b.FS}
		if i < len(s.binds) && s.binds[i] != nil {
			bind.Opened = &rootfs.OpenedSource{Tree: s.binds[i].initFD, Dir: s.binds[i].Dir, Path: s.binds[i].Path}
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
	p.FS(ops)
	if s.ahead && s.policy != nil && s.policy.Filter != nil {
		// The filter the pool expects its boxes' commands to have (the
		// default): a command with another one gets a fresh process.
		p.Prepare(s.policy.Filter, s.policy.Notify)
	}
	if s.session {
		p.Session()
	}
	p.BoxEnd(announce)
	return p, nil
}

// commandPlan is the command part of init's plan, but for the cgroup:
// the program and how to start it.
func (s *supervisor) commandPlan() *boxinit.Plan {
	sp := s.spec
	p := &boxinit.Plan{}
	p.Argv(sp.Command)
	env := sp.Env
	if env == nil {
		env = BaseEnv
	}
	p.Env(env)
	dir := sp.Chdir
	if dir == "" {
		dir = "/box"
	}
	p.Dir(dir)
	p.Cred(boxUID, boxUID)
	rl := func(res int, v int64) {
		if v > 0 {
			p.Rlimit(res, uint64(v))
		}
	}
	rl(unix.RLIMIT_FSIZE, sp.FileSize)
	rl(unix.RLIMIT_NOFILE, sp.OpenFiles)
	if sp.Stack == StackAsHard {
		// Read, never changed: the supervisor's own limits are the
		// service's, shared by every run. Init inherited them.
		var cur unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_STACK, &cur) == nil {
			p.Rlimit(unix.RLIMIT_STACK, cur.Max)
		}
	} else {
		rl(unix.RLIMIT_STACK, sp.Stack)
	}
	rl(unix.RLIMIT_AS, sp.AddrSpace)
	if sp.CPUTime > 0 {
		// A backstop only: the supervisor kills at the exact limit.
		rl(unix.RLIMIT_CPU, int64((sp.CPUTime+sp.ExtraTime)/time.Second)+2)
	}
	if s.host.rlimitsOnly() {
		s.rlimitsForCgroup(rl)
	}
	if s.policy != nil && s.policy.Filter != nil {
		p.Seccomp(s.policy.Filter, s.notifySock)
	}
	if sp.StderrToStdout {
		p.StderrToStdout()
	}
	if s.subIDs() != nil {
		s.handOver(p)
	}
	// Init keeps the box for copy-out, or while its end waits for the
	// caller (EndAfter): its exit is most of that end.
	if len(sp.CopyOut) > 0 || (s.claimed != nil && endAfter(s.ctx) != nil) {
		p.Hold()
	}
	// Init tells a program's start up to 10 ms late (init_main.c), and
	// the limits count from it once told: a limit that short could be
	// overrun by the wait.
	if sp.effectiveWall() < shortLimit || (sp.CPUTime > 0 && s.cpuTimeToLimit() < shortLimit) {
		p.TellStart()
	}
	return p
}

// handOver has init hand the box's writable directories, which the
// supervisor fills as the box's uid 0, to a box user that is a
// subordinate id, and back after the program when the supervisor reads
// them then (copy-out) or the caller removes them (exec's /box, a
// directory of the caller's). A bind over one of them is the caller's
// own directory: never handed over.
func (s *supervisor) handOver(p *boxinit.Plan) {
	var dirs []string
	for _, d := range []string{"/box", "/tmp"} {
		bound := false
		for _, b := range s.spec.Binds {
			bound = bound || hostfs.BoxPath(b.Box) == d
		}
		if !bound {
			dirs = append(dirs, d)
		}
	}
	back := len(s.spec.CopyOut) > 0 || (s.spec.BoxMount != nil && s.spec.BoxMount.Dir() != "")
	p.HandOver(back, dirs...)
}

// shortLimit is a wall time or CPU budget under which init tells the
// program's start at once: ten times its delay.
const shortLimit = 100 * time.Millisecond

// cpusUsable is how many CPUs the program may keep busy at once.
func (s *supervisor) cpusUsable() float64 {
	cpus := float64(boxinit.NumCPU())
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
func (s *supervisor) placeInCgroup(p *boxinit.Plan) {
	for i := range s.placement {
		if s.cg.ForkInto() {
			p.CgroupFork(i)
		} else {
			p.CgroupTasks(i)
		}
	}
	p.End()
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
		return w, startCapture(r, s.spec.OutputLimit, s.spec.OutputHeadTail, out), nil
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
	err = hostfs.WithFSThread(func(t *hostfs.FSThread) error {
		for _, c := range s.spec.CopyIn {
			if c.Content != nil {
				if err := hostfs.ContentIn(t, root, c.To, c.Content, c.Mode, s.boxCred()); err != nil {
					return fmt.Errorf("copy in %s: %w", hostfs.BoxPath(c.To), err)
				}
				continue
			}
			if err := hostfs.CopyIn(t, root, c.From, c.To, s.caller(), s.boxCred()); err != nil {
				return fmt.Errorf("--copy-in %s: %w", c.From, err)
			}
		}
		return nil
	})
	s.timer.mark("copy-in")
	return err
}

package isolate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// Session is a box that lives across calls (session.go). Its supervisor
// built the box as a run's does, with init told to serve a session; each
// command is a command part sent on the same control socket.
type Session struct {
	sv       *supervisor
	prepared *Prepared
	null     *os.File // init's own streams

	send sync.Mutex // serializes what is sent to init

	mu      sync.Mutex // guards what follows
	nextID  uint64
	procs   map[uint64]*Process
	ended   error // why the session ended; nil while it lives
	closing bool

	done       chan struct{}
	dispatched chan struct{} // the dispatcher has seen init's last message

	// cg is the session's cgroup while it lives: usage reads it under
	// cgMu, which close holds to take it away before tearing down.
	cgMu sync.RWMutex
	cg   *boxCgroup
}

// proc is a Process's state.
type proc struct {
	id   uint64
	sess *Session
	args []string
	// msgs are init's messages about the command: started (or exited
	// for one it could not start), then exited; closed when init ends.
	msgs   chan boxinit.Message
	done   chan struct{}
	report *api.Report
	// killedFor is the limit for which the session ended the command.
	killedFor string
	// cpuLimit is its processes' CPU time bound (RLIMIT_CPU), 0: none.
	cpuLimit time.Duration
}

// outputWaitDelay is how long a command's captured streams are read after
// its process ended, for what it wrote last; a process it left running
// that holds them does not keep the command waiting longer.
const outputWaitDelay = 200 * time.Millisecond

// sessionOnly names the fields of a run that a session takes per command,
// or not at all.
func checkSessionSpec(spec *api.Spec) error {
	switch {
	case spec.BoxID != nil:
		return &api.FieldError{Field: "box_id", Msg: "a session picks its own box"}
	case len(spec.CopyIn) > 0:
		return &api.FieldError{Field: "copy_in", Msg: "a session's files are written through its files"}
	case len(spec.CopyOut) > 0:
		return &api.FieldError{Field: "copy_out", Msg: "a session's files are read through its files"}
	case spec.CPUTimeMs != 0:
		return &api.FieldError{Field: "cpu_time_ms", Msg: "a session's time limits are its commands'"}
	case spec.WallTimeMs != 0:
		return &api.FieldError{Field: "wall_time_ms", Msg: "a session's time limits are its commands'"}
	}
	return nil
}

func (h *Host) startSession(ctx context.Context, spec *api.Spec) (*Session, error) {
	if err := checkSessionSpec(spec); err != nil {
		return nil, err
	}
	sp := *spec
	if len(sp.Args) == 0 {
		sp.Args = []string{"sh"} // (each command brings its own)
	}
	p, err := h.Prepare(&sp)
	if err != nil {
		return nil, err
	}
	null, err := devNull(syscall.O_RDWR)
	if err != nil {
		p.Close()
		return nil, err
	}
	sv := &supervisor{initLink: initLink{ctx: ctx}, host: h, spec: p.spec, policy: p.policy, timer: newStageTimer(), session: true,
		io: IO{Stdout: null, Stderr: null}}
	sv.report = &Report{BoxID: -1}
	s := &Session{sv: sv, prepared: p, null: null, procs: map[uint64]*Process{}, done: make(chan struct{}), dispatched: make(chan struct{})}
	if err := s.build(); err != nil {
		sv.report.Status = StatusXX
		sv.teardown()
		p.Close()
		null.Close()
		return nil, err
	}
	// The start is over: the session's box lives on its own.
	sv.ctx = context.Background()
	s.cg = sv.cg
	go s.dispatch()
	return s, nil
}

// build holds a box id, makes the cgroup while init starts and builds the
// box, and waits until it is built.
func (s *Session) build() error {
	sv := s.sv
	if err := sv.openBinds(); err != nil {
		return err
	}
	if err := sv.lockBox(); err != nil {
		return err
	}
	sv.createCgroup()
	err := sv.startInit()
	if err == nil {
		err = s.buildBox()
	}
	if cgErr := sv.awaitCgroup(); err == nil {
		err = cgErr
	}
	return err
}

func (s *Session) buildBox() error {
	sv := s.sv
	boxPart, err := sv.boxPlan(true)
	if err != nil {
		return err
	}
	box, err := sv.startBoxPart(boxPart)
	if err != nil {
		return err
	}
	if sv.boxPid, err = box.ready(); err != nil {
		return err
	}
	// A session keeps its allowlist's proxy for its life.
	return sv.startEgress()
}

// dispatch hands init's messages to the commands they are about, until
// init is gone.
func (s *Session) dispatch() {
	defer close(s.dispatched)
	for m := range s.sv.msgs {
		s.mu.Lock()
		p := s.procs[m.ID]
		if p != nil && m.Type == boxinit.MsgExited {
			delete(s.procs, m.ID)
		}
		s.mu.Unlock()
		if p != nil && (m.Type == boxinit.MsgStarted || m.Type == boxinit.MsgExited) {
			p.msgs <- m
		}
	}
	// Init has ended: on Close, or on its own (a failed step, killed).
	s.mu.Lock()
	if !s.closing && s.ended == nil {
		s.ended = fmt.Errorf("%w: its box's init ended", ErrSessionEnded)
	}
	procs := s.procs
	s.procs = map[uint64]*Process{}
	closing := s.closing
	s.mu.Unlock()
	for _, p := range procs {
		close(p.msgs)
	}
	if !closing {
		go s.close()
	}
}

func (s *Session) start(cmd SessionCommand, stdio IO) (*Process, error) {
	if len(cmd.Args) == 0 || cmd.Args[0] == "" {
		return nil, &api.FieldError{Field: "args", Msg: "no program given"}
	}
	spec := *s.sv.spec
	spec.Command = cmd.Args
	if cmd.Env != nil {
		spec.Env = cmd.Env
	}
	spec.Chdir = cmd.Cwd
	spec.StderrToStdout = cmd.StderrToStdout
	// An agent reading a long test run needs its summary at the end.
	spec.OutputHeadTail = true
	if cmd.OutputLimit > 0 {
		spec.OutputLimit = cmd.OutputLimit
	}
	spec.CPUTime, spec.ExtraTime, spec.WallTime, spec.CopyOut = 0, 0, cmd.WallTime, nil
	cpuLimit := cmd.CPUTime
	if spec.WallTime == 0 {
		spec.WallTime = time.Duration(1<<63 - 1)
	}
	cs := &supervisor{host: s.sv.host, spec: &spec, io: stdio, policy: s.sv.policy, notifySock: -1,
		cg: s.sv.cg, placement: s.sv.placement, initLink: s.sv.initLink}
	stdin, stdout, stderr, err := cs.stdio()
	if err != nil {
		closeAll(cs.closers)
		return nil, err
	}
	defer closeAll(cs.closers)

	s.send.Lock()
	s.mu.Lock()
	if s.ended != nil || s.closing {
		s.mu.Unlock()
		s.send.Unlock()
		cs.endStreams()
		return nil, s.endedErr()
	}
	s.nextID++
	p := &Process{proc{id: s.nextID, sess: s, args: cmd.Args, msgs: make(chan boxinit.Message, 2), done: make(chan struct{})}}
	s.procs[p.id] = p
	s.mu.Unlock()
	plan := cs.commandPlan()
	if cpuLimit > 0 {
		plan.Rlimit(unix.RLIMIT_CPU, uint64((cpuLimit+time.Second-1)/time.Second))
	}
	plan.CommandID(p.id)
	n := len(cs.placement)
	plan.Stdio(n, n+1, n+2)
	cs.placeInCgroup(plan)
	files := append(append([]*os.File(nil), cs.placement...), stdin, stdout, stderr)
	// (The OOM kills so far, to tell this command's from another's.)
	oomBefore, _ := s.oomKills()
	err = sendWithFiles(s.sv.ctl, plan.Buf, files)
	var m boxinit.Message
	if err == nil {
		timeout := time.NewTimer(setupTimeout)
		select {
		case mm, ok := <-p.msgs:
			if m = mm; !ok {
				err = s.endedErr()
			}
		case <-timeout.C:
			err = fmt.Errorf("init did not start it within %v", setupTimeout)
		}
		timeout.Stop()
	}
	s.send.Unlock()
	if err != nil {
		s.mu.Lock()
		delete(s.procs, p.id)
		s.mu.Unlock()
		cs.endStreams()
		return nil, fmt.Errorf("start the command: %w", err)
	}
	closeAll(cs.closers)
	cs.closers = nil
	p.cpuLimit = cpuLimit
	go p.supervise(cs, m, oomBefore, time.Now())
	return p, nil
}

// endStreams stops what stdio started for a command that never ran.
func (s *supervisor) endStreams() {
	closeAll(s.closers)
	s.closers = nil
	if s.stdinW != nil {
		s.stdinW.Close()
	}
}

// supervise waits for the command's end (killing its group at its wall
// time) and makes its report.
func (p *proc) supervise(cs *supervisor, first boxinit.Message, oomBefore int64, start time.Time) {
	defer close(p.done)
	s := p.sess
	var m boxinit.Message
	ok := true
	if first.Type == boxinit.MsgExited {
		m = first
	} else {
		var wall <-chan time.Time
		if d := cs.spec.WallTime; d < time.Duration(1<<63-1) {
			t := time.NewTimer(d)
			defer t.Stop()
			wall = t.C
		}
	wait:
		for {
			select {
			case m, ok = <-p.msgs:
				break wait
			case <-wall:
				p.killedFor = LimitWall
				s.signal(p.id, syscall.SIGKILL)
			}
		}
	}
	// What the command wrote last, then no more.
	stopAt := time.Now().Add(outputWaitDelay)
	for _, c := range []*capture{cs.stdout, cs.stderr} {
		if c != nil {
			c.stopBy(stopAt)
		}
	}
	after, uerr := s.usage()
	r := &Report{BoxID: s.sv.lock.id, BlockedSyscalls: []api.Blocked{}, Sandbox: SandboxInfo{Image: cs.spec.Image,
		Seccomp: policyName(cs.spec), Cgroup: s.sv.report.Sandbox.Cgroup}}
	cs.report = r
	cs.collect()
	r.MemoryPeak, r.PidsPeak = after.MemoryPeak, after.PidsPeak
	ws := syscall.WaitStatus(m.WaitStatus)
	if ok && p.killedFor == "" && ws.Signaled() && ws.Signal() == syscall.SIGKILL && s.err() != nil {
		ok = false // killed as the session ended
	}
	if !ok {
		r.WallTime = time.Since(start).Seconds()
		r.Status, r.Message, r.Cause = StatusXX, s.endedErr().Error(), s.endedErr()
		p.report = r
		return
	}
	commandVerdict(r, cs.spec, &m, p.killedFor, p.cpuLimit, uerr == nil && after.OOMKills > oomBefore)
	p.report = r
}

// commandVerdict fills a session command's report from init's exited.
// The session's cgroup is shared by its commands: an OOM kill in it is
// this command's only when this command died of SIGKILL meanwhile.
func commandVerdict(r *Report, sp *Spec, m *boxinit.Message, killedFor string, cpuLimit time.Duration, oomKilled bool) {
	ws := syscall.WaitStatus(m.WaitStatus)
	killed := ws.Signaled() && ws.Signal() == syscall.SIGKILL
	r.WallTime = time.Duration(m.WallNs).Seconds()
	r.UserTime = time.Duration(m.UserNs).Seconds()
	r.SysTime = time.Duration(m.SysNs).Seconds()
	r.CPUTime = r.UserTime + r.SysTime
	r.MaxRSS = m.MaxRSS * 1024
	r.CSWVoluntary, r.CSWInvoluntary = m.NVCSW, m.NIVCSW
	// (Its CPU bound is RLIMIT_CPU: SIGXCPU at it, SIGKILL a second later.)
	in := verdictInput{Wait: ws, ExecErr: m.ExecErr, CPU: time.Duration(m.UserNs + m.SysNs),
		CPULimit: cpuLimit, RlimitCPU: cpuLimit > 0,
		Killed: killedFor != "", KillLimit: killedFor, OOMKilled: oomKilled && killed}
	if m.ExecErr != "" {
		in.StartFailure = startFailure(sp.Command[0], m)
		r.StartFailure = in.StartFailure
	}
	v := verdict(in)
	r.Status, r.Limit, r.Message, r.Cause, r.ExitCode, r.Signal = v.Status, v.Limit, v.Message, v.Cause, v.ExitCode, v.Signal
	r.Killed, r.OOMKilled = in.Killed, in.OOMKilled
}

func (p *proc) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	return p.sess.signal(p.id, sig)
}

// signal sends sig to command id's group (0: every process of the box).
func (s *Session) signal(id uint64, sig syscall.Signal) error {
	s.send.Lock()
	defer s.send.Unlock()
	if s.err() != nil {
		return s.endedErr()
	}
	var p boxinit.Plan
	p.Signal(id, int(sig))
	if _, err := s.sv.ctl.Write(p.Buf); err != nil {
		return fmt.Errorf("signal the command: %w", err)
	}
	return nil
}

// oomKills is how many processes the OOM killer ended in the session.
func (s *Session) oomKills() (int64, error) {
	s.cgMu.RLock()
	defer s.cgMu.RUnlock()
	if s.cg == nil {
		return 0, s.endedErr()
	}
	return s.cg.OOMKills()
}

func (s *Session) usage() (SessionUsage, error) {
	s.cgMu.RLock()
	defer s.cgMu.RUnlock()
	cg := s.cg
	if cg == nil {
		return SessionUsage{}, s.endedErr()
	}
	var u SessionUsage
	var err error
	if u.CPUTime, err = cg.CPUUsage(); err != nil {
		return u, err
	}
	if u.MemoryBytes, _, err = cg.MemoryUsage(); err != nil {
		return u, err
	}
	if u.MemoryPeak, err = cg.MemoryPeak(); err != nil {
		return u, err
	}
	if u.PidsPeak, err = cg.PidsPeak(); err != nil {
		return u, err
	}
	if u.OOMKills, err = cg.OOMKills(); err != nil {
		return u, err
	}
	u.Pids, err = cg.Pids()
	return u, err
}

func (s *Session) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// endedErr is why a call finds the session ended.
func (s *Session) endedErr() error {
	if err := s.err(); err != nil {
		return err
	}
	return ErrSessionEnded
}

func (s *Session) close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closing = true
	if s.ended == nil {
		s.ended = ErrSessionEnded
	}
	s.mu.Unlock()
	s.cgMu.Lock()
	s.cg = nil
	s.cgMu.Unlock()
	sv := s.sv
	// Init kills everything in the box and reaps it once its control
	// socket closes (teardown closes it, then removes the emptied cgroup).
	sv.teardown()
	<-s.dispatched
	s.prepared.Close()
	s.null.Close()
	close(s.done)
	if sv.report.Status == StatusXX {
		return errors.New(sv.report.Message)
	}
	return nil
}

package handover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/internal/connlimit"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// DefaultSocket is where the service listens for handovers by default.
const DefaultSocket = "/run/isolate/cli.sock"

// Invocation is one handed-over command line, with the caller's
// descriptors: it belongs to the Runner until it returns (the server
// closes the descriptors then).
type Invocation struct {
	Args    []string // argv, argv[0] included
	Env     []string
	Dir     string   // the caller's working directory, as it named it
	DirFile *os.File // the same directory, O_PATH: relative paths resolve from it
	Stdin   *os.File
	Stdout  *os.File
	Stderr  *os.File
	Caller  caller.Caller // who the kernel says is at the other end
	// Signals are the signals the CLI got during the run, in order.
	Signals <-chan syscall.Signal
	// HungUp is closed once the CLI, told its exit, has closed the
	// connection (or died; at most hangUpWait after the exit was sent):
	// work left after the run may start then.
	HungUp <-chan struct{}
}

// Exit is how the CLI ends: exit with Code, or die of Signal if not 0.
type Exit struct {
	Code   int
	Signal syscall.Signal
}

// Runner runs one invocation. Its context ends when the caller is gone
// (the CLI died or was killed: the run must end at once) or when the
// service stops.
type Runner func(ctx context.Context, inv *Invocation) Exit

// Outcomes of a handover, for the service's metrics.
const (
	OutcomeCompleted  = "completed"   // ran, and the caller got its exit
	OutcomeCallerGone = "caller_gone" // the caller went away during the run
	OutcomeDeclined   = "declined"    // a different build, or the service stopping: the CLI ran it itself
	OutcomeBadRequest = "bad_request" // not a well-formed request
)

// ErrCallerGone is the cause of a run's context when the caller's
// connection closed before its exit.
var ErrCallerGone = errors.New("the caller is gone")

// hangUpWait bounds how long a connection stays open after the exit was
// sent, for the CLI to exit and close its end.
const hangUpWait = time.Second

// requestTimeout bounds how long a client may take to send its request:
// the CLI sends it at once.
const requestTimeout = 10 * time.Second

// Server hands runs to a Runner.
type Server struct {
	build   string
	cpus    string // this process's CPU affinity (cpusHex)
	umask   string // this process's umask (%04o)
	version string // the service's version (SetVersion), for declines
	run     Runner
	outcome func(string)
	// declines, if set, is why the service leaves a command line to the
	// CLI itself ("": it takes it).
	declines func(caller.Caller, []string) string

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	draining  bool
	running   sync.WaitGroup
	limits    connlimit.Limits
	listeners []*connlimit.Listener // each closes the listener it wraps
}

// NewServer accepts handovers from clients of build id build (a different
// build is declined: the CLI then runs in-process) and runs them with
// run. outcome, if not nil, is told each handover's outcome. Call it once
// this process has its CPU affinity (boxinit.MaybeInit restored it):
// only callers with the same one are taken.
func NewServer(build string, run Runner, outcome func(string)) *Server {
	s := &Server{build: build, run: run, outcome: outcome}
	var cpus unix.CPUSet
	unix.SchedGetaffinity(0, &cpus)
	s.cpus = cpusHex(&cpus)
	s.umask = ownUmask()
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	return s
}

// Serve accepts handovers on l until Shutdown, within the server's
// connection limits (LimitConnections). Running out of descriptors
// pauses it (an idle connection's place frees within requestTimeout); it
// never ends it.
func (s *Server) Serve(l *net.UnixListener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	limited := connlimit.New(l, s.limits)
	s.listeners = append(s.listeners, limited)
	s.mu.Unlock()
	for {
		c, err := limited.Accept()
		if err != nil {
			s.mu.Lock()
			draining := s.draining
			s.mu.Unlock()
			if draining {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close() // gives its place back
			lc := c.(*connlimit.Conn)
			s.handle(lc.NetConn().(*net.UnixConn), lc.Cred)
		}()
	}
}

// DeclineWhen has the server decline each handover for which why, given
// the caller and the command line, says why (the CLI then runs it
// in-process); "" takes it. Call it before Serve.
func (s *Server) DeclineWhen(why func(c caller.Caller, args []string) string) { s.declines = why }

// LimitConnections sets the most connections held at once, in all and
// per uid, on the listeners Serve is given afterwards.
func (s *Server) LimitConnections(l connlimit.Limits) {
	s.mu.Lock()
	s.limits = l
	s.mu.Unlock()
}

// Connections are the connections held now, those closed at once for
// being beyond the limits, and the accepts that found no descriptor (and
// were retried).
func (s *Server) Connections() (held int, refused, starved int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return connlimit.Totals(s.listeners)
}

// Shutdown stops accepting, lets running handovers finish within grace,
// then cancels what still runs (its boxes are killed, its callers get
// their exit) and waits for it.
func (s *Server) Shutdown(grace time.Duration) {
	s.mu.Lock()
	s.draining = true
	for _, l := range s.listeners {
		l.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.cancel(errors.New("the service is stopping"))
		<-done
	}
	s.cancel(errors.New("the service stopped"))
}

// SetVersion names the version of isolate the service is, for the
// reason it declines another build's runs with. Call it before Serve.
func (s *Server) SetVersion(v string) { s.version = v }

// otherBuild is why the service declines a client of build id build (the
// CLI recognises it by its beginning, "it runs isolate ": cmd/isolate's
// otherBuild): it
// is another version of isolate than the one the service was started
// with (an upgrade replaced the binaries; the service runs on until it
// restarts).
func (s *Server) otherBuild(build string) string {
	v := s.version
	if v == "" {
		v = "(version unknown)"
	}
	return fmt.Sprintf("it runs isolate %s and takes runs only from the isolate binary it was started with "+
		"(build id %.12s, this one's %.12s): after an upgrade, restart it (systemctl restart isolate)",
		v, s.build, build)
}

// admit counts a run in, unless the service is stopping.
func (s *Server) admit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.running.Add(1)
	return true
}

func (s *Server) tell(outcome string) {
	if s.outcome != nil {
		s.outcome(outcome)
	}
}

// handle serves one connection: one handover; cred is its peer's
// credentials when the connection limits read them (else nil).
func (s *Server) handle(c *net.UnixConn, cred *unix.Ucred) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(requestTimeout))
	req, files, err := readRequest(c)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err != nil {
		s.decline(c, err.Error())
		s.tell(OutcomeBadRequest)
		return
	}
	var peer caller.Caller
	raw, err := c.SyscallConn()
	if err == nil {
		raw.Control(func(fd uintptr) { peer, err = caller.FromSocket(int(fd), cred, caller.Handover) })
	}
	if err != nil {
		s.decline(c, err.Error())
		s.tell(OutcomeBadRequest)
		return
	}
	if req.build != s.build {
		s.decline(c, s.otherBuild(req.build))
		s.tell(OutcomeDeclined)
		return
	}
	if req.cpus != s.cpus {
		s.decline(c, "the caller's CPU affinity is not the service's: the program would not inherit it")
		s.tell(OutcomeDeclined)
		return
	}
	if req.umask != s.umask {
		s.decline(c, "the caller's umask is not the service's: files the run creates would get other modes")
		s.tell(OutcomeDeclined)
		return
	}
	if s.declines != nil {
		if why := s.declines(peer, req.args); why != "" {
			s.decline(c, why)
			s.tell(OutcomeDeclined)
			return
		}
	}
	if !s.admit() {
		s.decline(c, "the service is stopping")
		s.tell(OutcomeDeclined)
		return
	}
	defer s.running.Done()
	if _, err := c.Write(answer(tagAccepted, 0, 0)); err != nil {
		s.tell(OutcomeCallerGone)
		return
	}
	c.SetReadDeadline(time.Time{})

	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	sigs := make(chan syscall.Signal, 8)
	hungUp := make(chan struct{})
	go func() {
		relaySignals(ctx, c, sigs, cancel)
		close(hungUp)
	}()
	exit := s.run(ctx, &Invocation{
		Args: req.args, Env: req.env, Dir: req.dir, DirFile: files[3],
		Stdin: files[0], Stdout: files[1], Stderr: files[2],
		Caller: peer, Signals: sigs, HungUp: hungUp,
	})
	gone := context.Cause(ctx) == ErrCallerGone // before the caller, told, hangs up
	if _, err := c.Write(answer(tagExit, int32(exit.Code), int32(exit.Signal))); err != nil || gone {
		s.tell(OutcomeCallerGone)
		return
	}
	s.tell(OutcomeCompleted)
	// Told its exit, the CLI exits: its end of the connection closes.
	c.SetReadDeadline(time.Now().Add(hangUpWait))
	<-hungUp
}

// relaySignals passes the signal bytes the client sends on to sigs, and
// cancels the run with ErrCallerGone when the connection ends: the CLI
// died. It returns once the connection is closed.
func relaySignals(ctx context.Context, c *net.UnixConn, sigs chan<- syscall.Signal, cancel context.CancelCauseFunc) {
	buf := make([]byte, 16)
	for {
		n, err := c.Read(buf)
		for _, b := range buf[:n] {
			select {
			case sigs <- syscall.Signal(b):
			case <-ctx.Done():
			}
		}
		if err != nil {
			cancel(ErrCallerGone)
			return
		}
	}
}

// decline tells the client to run the invocation itself, and why.
func (s *Server) decline(c *net.UnixConn, why string) {
	c.Write(append(answer(tagDeclined, int32(len(why)), 0), why...))
}

// readRequest reads one request and the descriptors attached to it.
func readRequest(c *net.UnixConn) (*request, []*os.File, error) {
	buf := make([]byte, 16<<10) // a request is a few KB; a longer one is read on below
	oob := make([]byte, unix.CmsgSpace(nfds*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	files, ferr := attachedFiles(oob[:oobn])
	if err == nil && flags&unix.MSG_CTRUNC != 0 {
		err = errors.New("more descriptors than a request has")
	}
	if err == nil {
		err = ferr
	}
	if err == nil && len(files) != nfds {
		err = fmt.Errorf("%d descriptors attached, want %d", len(files), nfds)
	}
	if err == nil && n < headerSize {
		_, err = io.ReadFull(c, buf[n:headerSize])
		n = headerSize
	}
	if err != nil {
		return nil, files, fmt.Errorf("read the request: %w", err)
	}
	size, err := bodyLength(buf[:headerSize])
	if err != nil {
		return nil, files, err
	}
	body := make([]byte, size)
	got := copy(body, buf[headerSize:n])
	if _, err := io.ReadFull(c, body[got:]); err != nil {
		return nil, files, fmt.Errorf("read the request: %w", err)
	}
	req, err := decodeRequest(body)
	return req, files, err
}

// attachedFiles takes the descriptors of SCM_RIGHTS messages.
func attachedFiles(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	names := []string{"stdin", "stdout", "stderr", "cwd"}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			name := "fd"
			if len(files) < len(names) {
				name = names[len(files)]
			}
			files = append(files, os.NewFile(uintptr(fd), name))
		}
	}
	return files, nil
}

// ownUmask reads this process's umask without changing it (umask(2)
// would, for a moment, for every thread).
func ownUmask() string {
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range bytes.Split(status, []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte("Umask:")); ok {
			return string(bytes.TrimSpace(v))
		}
	}
	return "?"
}

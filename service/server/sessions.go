package server

// Sessions: one box that lives across calls, owned by the caller that
// made it. The registry here holds them, bounds how many there are (in
// all, per caller), ends them when their lease or idle time runs out,
// and ends them all when the service stops. The boxes themselves are
// the isolate package's (isolate.Session), reached through SessionHost
// so that the HTTP layer is tested without root over a fake.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/codecontext"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// SessionHost starts sessions (isolate.Host, through HostSessions).
type SessionHost interface {
	StartSession(ctx context.Context, spec *api.Spec) (SessionBox, error)
}

// SessionBox is one session's box: isolate.Session's methods.
type SessionBox interface {
	Start(cmd isolate.SessionCommand, stdio isolate.IO) (SessionProcess, error)
	Usage() (isolate.SessionUsage, error)
	WriteFile(path string, r io.Reader, mode os.FileMode) (int64, error)
	OpenFile(path string) (*os.File, isolate.FileInfo, error)
	Stat(path string) (isolate.FileInfo, error)
	List(path string, maxEntries int) ([]isolate.FileInfo, error)
	Remove(path string) error
	Done() <-chan struct{}
	Err() error
	Close() error
}

// SessionProcess is a command running in a session (isolate.Process).
type SessionProcess interface {
	ID() uint64
	Signal(sig syscall.Signal) error
	Done() <-chan struct{}
	Wait() *api.Report
}

// CodeBox is a session that runs code in interpreter contexts; a
// SessionBox without it answers /code with 501.
type CodeBox interface {
	NewCodeContext(language string) (CodeContext, error)
}

// CodeContext is one interpreter of a session, keeping its state (its
// variables, imports) from one run to the next.
type CodeContext interface {
	Run(ctx context.Context, code string, onStdout, onStderr func(string)) (*Execution, error)
	Close() error
}

// Execution is what running code in a context gave (isolate's).
type Execution = codecontext.Execution

// ExecError is the exception code raised (Name "ContextDied" when the
// interpreter itself died).
type ExecError = codecontext.ExecError

// HostSessions starts sessions on a real host.
type HostSessions struct{ Host *isolate.Host }

// StartSession starts a session on the host.
func (h HostSessions) StartSession(ctx context.Context, spec *api.Spec) (SessionBox, error) {
	s, err := h.Host.StartSession(ctx, spec)
	if err != nil {
		return nil, err
	}
	return hostSession{s}, nil
}

type hostSession struct{ *isolate.Session }

// NewCodeContext starts an interpreter context in the session.
func (s hostSession) NewCodeContext(language string) (CodeContext, error) {
	cc, err := s.Session.NewCodeContext(language)
	if err != nil {
		return nil, err
	}
	return cc, nil
}

func (s hostSession) Start(cmd isolate.SessionCommand, stdio isolate.IO) (SessionProcess, error) {
	p, err := s.Session.Start(cmd, stdio)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Defaults and bounds of sessions.
const (
	DefaultMaxSessions          = 64
	DefaultMaxSessionsPerCaller = 8
	DefaultSessionMaxTimeout    = time.Hour
	defaultSessionTimeout       = 5 * time.Minute
	defaultSessionIdle          = 10 * time.Minute
	// defaultCommandWall ends a foreground command that names no
	// timeout; a background one runs until it ends or the session does.
	defaultCommandWall = time.Minute
	// maxProcessRecords bounds the background commands a session keeps
	// (running, or ended with their reports): the oldest ended ones go
	// first.
	maxProcessRecords = 64
	// maxContexts bounds a session's interpreter contexts.
	maxContexts = 16
	// maxListEntries bounds a directory listing.
	maxListEntries = 10000
)

// errSessionCap is a session beyond --max-sessions or
// --max-sessions-per-caller: 429.
var errSessionCap = errors.New("too many sessions")

// errNoSession is an unknown session, or another caller's: 404 either
// way, so that nobody learns that another caller's session exists.
var errNoSession = errors.New("no such session (ended, expired, or never made)")

// sessions is the service's registry of sessions.
type sessions struct {
	host      SessionHost
	max       int
	perCaller int
	maxLease  time.Duration
	now       func() time.Time

	mu      sync.Mutex
	byID    map[string]*session
	owned   map[string]int // sessions (and starts under way) per account
	pending int            // starts under way
	closed  bool           // the service stopped: no more sessions
	ends    sync.WaitGroup // sessions being closed
}

func newSessions(cfg *Config) *sessions {
	r := &sessions{host: cfg.Sessions, max: cfg.MaxSessions, perCaller: cfg.MaxSessionsPerCaller, maxLease: cfg.SessionMaxTimeout,
		now: time.Now, byID: map[string]*session{}, owned: map[string]int{}}
	if r.max <= 0 {
		r.max = DefaultMaxSessions
	}
	if r.perCaller <= 0 {
		r.perCaller = DefaultMaxSessionsPerCaller
	}
	if r.maxLease <= 0 {
		r.maxLease = DefaultSessionMaxTimeout
	}
	return r
}

// ownerOf is who owns what c makes, and may use it: a uid (root's too:
// root's sessions are root's), or the token's callers together. Whose
// budget it counts against is c.Account().
func ownerOf(c caller.Caller) string {
	switch c.Via {
	case caller.TCP:
		return "tcp"
	case caller.Queue:
		return "queue"
	}
	return fmt.Sprintf("uid:%d", c.UID)
}

// session is one live session.
type session struct {
	reg     *sessions
	id      string
	owner   string
	account string // whose budget it counts against (caller.Account)
	box     SessionBox
	// outputLimit is what a command's captured stream keeps by default.
	outputLimit int64
	env         []string // the session's environment, which a command's env adds to
	created     time.Time

	mu          sync.Mutex
	lease, idle time.Duration
	expires     time.Time // lease
	lastUsed    time.Time
	busy        int // requests working on it now: it is not idle
	ended       bool
	timer       *time.Timer
	procs       map[uint64]*sessionProc
	order       []uint64 // procs in the order they started
	contexts    map[string]*codeContext
	nextContext int
	defaultCtx  map[string]string // a language's default context: its id
	metadata    Metadata          // the caller's, set at its creation
}

// sessionProc is a command of a session the service keeps track of.
type sessionProc struct {
	p          SessionProcess
	args       []string
	background bool
	stdinMu    sync.Mutex
	stdin      *os.File // the write end of a background command's stdin, until closed
	stdinEnd   *os.File // its read end, which the service holds until the command ends
	fileMu     sync.Mutex
	// held is what the ledger counts for a background command: its
	// output at its limit while it runs, as kept once it ended, until
	// its record is dropped.
	held        *caller.Hold
	streamLimit int64 // what one of its captured streams keeps at most
	// release gives back its run slot; settled runs settle once.
	release func()
	settled sync.Once
}

// stdinFile is the write end of the command's stdin, nil once closed;
// read without stdinMu, which a blocked write holds.
func (p *sessionProc) stdinFile() *os.File {
	p.fileMu.Lock()
	defer p.fileMu.Unlock()
	return p.stdin
}

// codeContext is one interpreter context of a session.
type codeContext struct {
	id       string
	language string
	mu       sync.Mutex // one run at a time
	ccMu     sync.Mutex
	cc       CodeContext // nil until it started
	count    atomic.Int64
}

// context is the started context, or nil.
func (c *codeContext) context() CodeContext {
	c.ccMu.Lock()
	defer c.ccMu.Unlock()
	return c.cc
}

func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// reserve takes a place for a new session of account, or says why not.
func (r *sessions) reserve(account string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return errStopping
	case len(r.byID)+r.pending >= r.max:
		return fmt.Errorf("%w: the service holds %d sessions, its maximum (--max-sessions)", errSessionCap, r.max)
	case r.owned[account] >= r.perCaller:
		return fmt.Errorf("%w: this caller holds %d sessions, its maximum (--max-sessions-per-caller); delete one first", errSessionCap, r.perCaller)
	}
	r.pending++
	r.owned[account]++
	return nil
}

// unreserve gives back a place reserve took for a start that failed.
func (r *sessions) unreserve(account string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending--
	r.release(account)
}

func (r *sessions) release(account string) {
	if r.owned[account]--; r.owned[account] <= 0 {
		delete(r.owned, account)
	}
}

var errStopping = errors.New("the service is stopping")

// add records a started session in the place reserve took, with its
// lease and idle time, and watches its box and its deadlines.
func (r *sessions) add(owner, account string, box SessionBox, env []string, lease, idle time.Duration) *session {
	now := r.now()
	s := &session{reg: r, id: newID(), owner: owner, account: account, box: box, env: env, created: now,
		lease: lease, idle: idle, expires: now.Add(lease), lastUsed: now,
		procs: map[uint64]*sessionProc{}, contexts: map[string]*codeContext{}}
	r.mu.Lock()
	r.pending--
	if r.closed {
		r.release(account)
		r.mu.Unlock()
		box.Close()
		return nil
	}
	r.byID[s.id] = s
	r.mu.Unlock()
	s.mu.Lock()
	s.timer = time.AfterFunc(s.nextDeadline(now), func() { r.check(s) })
	s.mu.Unlock()
	go func() {
		<-box.Done() // the box died on its own (or was closed)
		r.end(s, nil)
	}()
	return s
}

// nextDeadline is how long until s's lease or idle time may end it (s.mu
// held).
func (s *session) nextDeadline(now time.Time) time.Duration {
	d := s.expires.Sub(now)
	if s.busy == 0 {
		d = min(d, s.lastUsed.Add(s.idle).Sub(now))
	}
	return max(d, 0)
}

// expired tells why s is over at now, or "" (s.mu held).
func (s *session) expired(now time.Time) string {
	switch {
	case !now.Before(s.expires):
		return "its lease (timeout_ms) ran out"
	case s.busy == 0 && !now.Before(s.lastUsed.Add(s.idle)):
		return "it was idle for idle_timeout_ms"
	}
	return ""
}

// check ends s if its time is up, or sets its timer for when it may be.
func (r *sessions) check(s *session) {
	now := r.now()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	why := s.expired(now)
	if why == "" {
		s.timer.Reset(s.nextDeadline(now))
	}
	s.mu.Unlock()
	if why != "" {
		r.end(s, nil)
	}
}

// sweep checks every session against the clock (the timers do it one
// by one; a test with its own clock calls this).
func (r *sessions) sweep() {
	r.mu.Lock()
	all := make([]*session, 0, len(r.byID))
	for _, s := range r.byID {
		all = append(all, s)
	}
	r.mu.Unlock()
	for _, s := range all {
		r.check(s)
	}
}

// get finds the session id of owner and marks it in use until done is
// called: it is not idle meanwhile, and its idle time starts again after.
func (r *sessions) get(id, owner string) (s *session, done func(), err error) {
	r.mu.Lock()
	s = r.byID[id]
	r.mu.Unlock()
	if s == nil || s.owner != owner {
		return nil, nil, errNoSession
	}
	now := r.now()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil, nil, errNoSession
	}
	// Its time is up, though its timer has not fired yet.
	if s.expired(now) != "" {
		s.mu.Unlock()
		r.end(s, nil)
		return nil, nil, errNoSession
	}
	defer s.mu.Unlock()
	s.busy++
	s.lastUsed = now
	var once sync.Once
	return s, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.busy--
			now := r.now()
			s.lastUsed = now
			if !s.ended && s.timer != nil {
				s.timer.Reset(s.nextDeadline(now))
			}
		})
	}, nil
}

// list is owner's sessions, oldest first.
func (r *sessions) list(owner string) []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*session
	for _, s := range r.byID {
		if s.owner == owner {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].created.Before(out[j].created) })
	return out
}

// count is the number of live sessions.
func (r *sessions) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

// end ends s: it is gone from the registry at once (404 from then on),
// and its box, with every process in it, is closed before end returns.
// The commands that were running answer XX.
func (r *sessions) end(s *session, _ error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	if s.timer != nil {
		s.timer.Stop()
	}
	procs := s.procs
	contexts := s.contexts
	s.procs, s.contexts = map[uint64]*sessionProc{}, map[string]*codeContext{}
	s.mu.Unlock()
	r.mu.Lock()
	if r.byID[s.id] == s {
		delete(r.byID, s.id)
		r.release(s.account)
	}
	r.ends.Add(1)
	r.mu.Unlock()
	defer r.ends.Done()
	// The box first: a context's Close waits for the code it runs, which
	// ends when the box does.
	s.box.Close()
	for _, c := range contexts {
		if cc := c.context(); cc != nil {
			cc.Close()
		}
	}
	for _, p := range procs {
		p.closeStdin()
		p.held.Release()
	}
}

// closeAll ends every session and takes no more: the service stops.
func (r *sessions) closeAll() {
	r.mu.Lock()
	r.closed = true
	all := make([]*session, 0, len(r.byID))
	for _, s := range r.byID {
		all = append(all, s)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() { defer wg.Done(); r.end(s, nil) }()
	}
	wg.Wait()
	r.ends.Wait()
}

// renew sets s's lease to d from now.
func (s *session) renew(d time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.reg.now()
	s.lease, s.expires = d, now.Add(d)
	if !s.ended && s.timer != nil {
		s.timer.Reset(s.nextDeadline(now))
	}
	return s.expires
}

// addProc records a command of s, dropping the oldest ended background
// ones beyond maxProcessRecords; false when s has ended or keeps as many
// running ones as it may.
func (s *session) addProc(sp *sessionProc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return isolate.ErrSessionEnded
	}
	if len(s.procs) >= maxProcessRecords {
		s.dropOldestEnded()
	}
	if len(s.procs) >= maxProcessRecords {
		return fmt.Errorf("%w: %d commands run in this session already", errSessionCap, maxProcessRecords)
	}
	id := sp.p.ID()
	s.procs[id] = sp
	s.order = append(s.order, id)
	return nil
}

// dropOldestEnded forgets the oldest ended background command, and what
// the ledger counts for it; false when none has ended (s.mu held).
func (s *session) dropOldestEnded() bool {
	for i, id := range s.order {
		if p := s.procs[id]; p != nil && p.background && p.ended() {
			delete(s.procs, id)
			s.order = append(s.order[:i:i], s.order[i+1:]...)
			p.held.Release()
			return true
		}
	}
	return false
}

// holdBackground takes what the ledger counts for a background command
// of s, forgetting older ended commands of s (their reports are the
// oldest kept) while that makes room: while the ledger refuses the bytes
// and they would fit once let go, not past the background commands'
// bound nor for bytes that never fit.
func (s *session) holdBackground(l *caller.Ledger, u caller.Usage) (*caller.Hold, error) {
	for {
		h, err := l.Hold(s.account, u)
		if err == nil {
			return h, nil
		}
		var ob *caller.OverBudget
		if !errors.As(err, &ob) || ob.Never || ob.Background {
			return nil, err
		}
		s.mu.Lock()
		dropped := s.dropOldestEnded()
		s.mu.Unlock()
		if !dropped {
			return nil, err
		}
	}
}

// dropProc forgets a foreground command once its report is answered.
func (s *session) dropProc(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.procs, id)
	for i, x := range s.order {
		if x == id {
			s.order = append(s.order[:i:i], s.order[i+1:]...)
			break
		}
	}
}

func (s *session) hasEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

func (s *session) proc(id uint64) *sessionProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[id]
}

func (p *sessionProc) ended() bool {
	select {
	case <-p.p.Done():
		return true
	default:
		return false
	}
}

func (p *sessionProc) closeStdin() {
	// A write blocked on a full pipe gives up first, so the lock is free.
	if f := p.stdinFile(); f != nil {
		f.SetWriteDeadline(time.Unix(1, 0))
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	p.fileMu.Lock()
	defer p.fileMu.Unlock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
}

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/codecontext"
	"github.com/isolate-sandbox/isolate/langs"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// SessionRequest is the body of POST /v1/sessions: the box's image,
// environment and limits, as a run's (memory_bytes, pids and cpus bound
// the session as a whole; the rlimits each command), its lease and its
// idle time.
type SessionRequest struct {
	Image            string       `json:"image,omitempty"`
	Lang             string       `json:"lang,omitempty"`
	Net              string       `json:"net,omitempty"`
	Network          *api.Network `json:"network,omitempty"`
	Env              []string     `json:"env,omitempty"`
	Seccomp          string       `json:"seccomp,omitempty"`
	MemoryBytes      int64        `json:"memory_bytes,omitempty"`
	Pids             int64        `json:"pids,omitempty"`
	CPUs             float64      `json:"cpus,omitempty"`
	TmpSizeBytes     int64        `json:"tmp_size_bytes,omitempty"`
	FileSizeBytes    int64        `json:"file_size_bytes,omitempty"`
	OpenFiles        int64        `json:"open_files,omitempty"`
	StackBytes       int64        `json:"stack_bytes,omitempty"`
	OutputLimitBytes int64        `json:"output_limit_bytes,omitempty"`
	// TimeoutMs is the lease (default 5 min, at most --session-max-timeout).
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// IdleTimeoutMs ends the session after this long without a request
	// (default 10 min).
	IdleTimeoutMs int64 `json:"idle_timeout_ms,omitempty"`
	// Metadata is the caller's, to find the session by (session_meta.go).
	Metadata Metadata `json:"metadata,omitempty"`
}

// SessionCommandRequest is the body of POST /v1/sessions/{id}/commands.
type SessionCommandRequest struct {
	Args []string `json:"args"`
	// Env are NAME=VALUE entries on top of the session's environment.
	Env   []string `json:"env,omitempty"`
	Cwd   string   `json:"cwd,omitempty"`
	Stdin *string  `json:"stdin,omitempty"`
	// TimeoutMs is the command's wall time (default 60 s in the
	// foreground, none in the background).
	TimeoutMs        int64 `json:"timeout_ms,omitempty"`
	Background       bool  `json:"background,omitempty"`
	StderrToStdout   bool  `json:"stderr_to_stdout,omitempty"`
	OutputLimitBytes int64 `json:"output_limit_bytes,omitempty"`
	Stream           bool  `json:"stream,omitempty"`
}

// SessionAnswer describes a session.
type SessionAnswer struct {
	ID            string         `json:"id"`
	CreatedAt     *time.Time     `json:"created_at,omitempty"`
	ExpiresAt     time.Time      `json:"expires_at"`
	IdleExpiresAt time.Time      `json:"idle_expires_at"`
	LastUsedAt    *time.Time     `json:"last_used_at,omitempty"`
	Metadata      Metadata       `json:"metadata,omitzero"`
	Usage         *SessionUsage  `json:"usage,omitempty"`
	Processes     []ProcessState `json:"processes,omitzero"`
	Contexts      []ContextState `json:"contexts,omitempty"`
	// Owner is whose it is (root's view: ?all=1).
	Owner string `json:"owner,omitempty"`
}

// SessionUsage is what a session's box has used so far.
type SessionUsage struct {
	CPUTime     float64 `json:"cpu_time"` // seconds
	MemoryBytes int64   `json:"memory_bytes"`
	MemoryPeak  int64   `json:"memory_peak"`
	Pids        int64   `json:"pids"`
	PidsPeak    int64   `json:"pids_peak"`
	OOMKills    int64   `json:"oom_kills"`
}

// ProcessState is a command of a session.
type ProcessState struct {
	ID      uint64      `json:"id"`
	Args    []string    `json:"args"`
	Running bool        `json:"running"`
	Report  *api.Report `json:"report,omitempty"` // once it ended
}

// ContextState is an interpreter context of a session.
type ContextState struct {
	ID             string `json:"id"`
	Language       string `json:"language"`
	ExecutionCount int    `json:"execution_count"`
}

// CodeRequest is the body of POST /v1/sessions/{id}/code.
type CodeRequest struct {
	Code      string `json:"code"`
	Context   string `json:"context,omitempty"`  // a context's id; "": the session's default one
	Language  string `json:"language,omitempty"` // of the default context (python, javascript, bash)
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
	Stream    bool   `json:"stream,omitempty"`
	// Env (NAME=VALUE) and Cwd hold for this call only (codecontext.CallOptions).
	Env []string `json:"env,omitempty"`
	Cwd string   `json:"cwd,omitempty"`
}

// CodeAnswer is what running code answers.
type CodeAnswer struct {
	Type string `json:"type,omitempty"` // "execution" when streamed
	Execution
	Context  string  `json:"context"`
	WallTime float64 `json:"wall_time"`
}

type timeoutRequest struct {
	TimeoutMs int64 `json:"timeout_ms"`
}

type signalRequest struct {
	Signal any `json:"signal"`
}

type contextRequest struct {
	Language string `json:"language"`
}

// registerSessions adds the sessions' endpoints.
func (s *Server) registerSessions(handle func(pattern, endpoint string, h http.HandlerFunc)) {
	for _, e := range []struct {
		pattern, endpoint string
		h                 http.HandlerFunc
	}{
		{"POST /v1/sessions", "sessions", s.handleSessionCreate},
		{"GET /v1/sessions", "sessions", s.handleSessionList},
		{"GET /v1/sessions/{id}", "sessions", s.handleSessionGet},
		{"DELETE /v1/sessions/{id}", "sessions", s.handleSessionDelete},
		{"POST /v1/sessions/{id}/timeout", "sessions", s.handleSessionTimeout},
		{"POST /v1/sessions/{id}/commands", "session_commands", s.handleSessionCommand},
		{"GET /v1/sessions/{id}/commands/{pid}", "session_commands", s.handleProcessGet},
		{"POST /v1/sessions/{id}/commands/{pid}/stdin", "session_commands", s.handleProcessStdin},
		{"POST /v1/sessions/{id}/commands/{pid}/signal", "session_commands", s.handleProcessSignal},
		{"POST /v1/sessions/{id}/commands/{pid}/wait", "session_commands", s.handleProcessWait},
		{"POST /v1/sessions/{id}/contexts", "session_code", s.handleContextCreate},
		{"DELETE /v1/sessions/{id}/contexts/{cid}", "session_code", s.handleContextDelete},
		{"POST /v1/sessions/{id}/code", "session_code", s.handleCode},
		{"PUT /v1/sessions/{id}/files/{path...}", "session_files", s.handleSessionFilePut},
		{"GET /v1/sessions/{id}/files/{path...}", "session_files", s.handleSessionFileGet},
		{"DELETE /v1/sessions/{id}/files/{path...}", "session_files", s.handleSessionFileDelete},
		{"POST /v1/sessions/{id}/files/{path...}", "session_files", s.handleSessionFileOp},
	} {
		h := e.h
		handle(e.pattern, e.endpoint, func(w http.ResponseWriter, r *http.Request) {
			if s.sessions == nil {
				writeError(w, http.StatusNotImplemented, errors.New("this service runs no sessions"))
				return
			}
			h(w, r)
		})
	}
}

// absoluteBoxPaths lets a session file's path be absolute with a plain
// slash ("files//tmp/x", as a client joins "/tmp/x" to the URL): the
// mux would clean the double slash into a path relative to /box; an
// escaped one ("files/%2Ftmp/x") it keeps.
func absoluteBoxPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.EscapedPath(); strings.HasPrefix(p, "/v1/sessions/") {
			if i := strings.Index(p, "/files//"); i > 0 {
				u := *r.URL
				u.RawPath = p[:i] + "/files/%2F" + p[i+len("/files//"):]
				if up, err := url.PathUnescape(u.RawPath); err == nil {
					u.Path = up
					r2 := *r
					r2.URL = &u
					r = &r2
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// sessionErr is the answer to a session's error.
func sessionErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errNoSession), errors.Is(err, isolate.ErrSessionEnded):
		writeError(w, http.StatusNotFound, errNoSession)
	case errors.Is(err, errSessionCap):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, err)
	case errors.Is(err, errStopping):
		w.Header().Set("Retry-After", "1")
		writeError(w, statusOf(err), err)
	default:
		writeError(w, statusOf(err), err)
	}
}

// fileErr is the answer to an error of a session's file: the path's
// fault (400, 404 naming it), a full file system (507), or the session's.
func fileErr(w http.ResponseWriter, err error) {
	var errno syscall.Errno
	switch {
	case errors.Is(err, errNoSession), errors.Is(err, isolate.ErrSessionEnded):
		sessionErr(w, err)
	case errors.Is(err, fs.ErrNotExist):
		writeError(w, http.StatusNotFound, &api.FieldError{Field: "path", Msg: "no such file in the box"})
	case errors.As(err, &errno) && (errno == syscall.ENOSPC || errno == syscall.EDQUOT || errno == syscall.EFBIG):
		writeError(w, http.StatusInsufficientStorage, fmt.Errorf("the box's file system is full (tmp_size_bytes, file_size_bytes): %w", err))
	case errors.As(err, &errno):
		writeError(w, http.StatusBadRequest, &api.FieldError{Field: "path", Msg: err.Error()})
	default:
		sessionErr(w, err)
	}
}

// sessionOf is the request's session, in use until done; ok is false
// when there is none the caller may use, and then the client has its
// answer.
func (s *Server) sessionOf(w http.ResponseWriter, r *http.Request) (sess *session, done func(), ok bool) {
	sess, done, err := s.sessions.get(r.PathValue("id"), ownerOf(callerOf(r)))
	if err != nil {
		sessionErr(w, err)
		return nil, nil, false
	}
	return sess, done, true
}

// readBody decodes an optional body (none: v stays as it is).
func readBody[T any](s *Server, w http.ResponseWriter, r *http.Request, v *T) (leave func(), ok bool) {
	if r.ContentLength == 0 {
		return func() {}, true
	}
	return read(s, w, r, v)
}

// sessionSpec checks req and makes the session's spec, its lease and
// idle time, with the caller's caps applied.
func (s *Server) sessionSpec(req *SessionRequest, who caller.Caller) (*api.Spec, time.Duration, time.Duration, error) {
	if err := checkMetadata(req.Metadata); err != nil {
		return nil, 0, 0, err
	}
	spec := &api.Spec{Args: []string{"session"}, Image: req.Image, Lang: req.Lang, Net: req.Net, Network: req.Network, Env: req.Env, Seccomp: req.Seccomp,
		MemoryBytes: req.MemoryBytes, Pids: req.Pids, CPUs: req.CPUs, TmpSizeBytes: req.TmpSizeBytes, FileSizeBytes: req.FileSizeBytes,
		OpenFiles: req.OpenFiles, StackBytes: req.StackBytes, OutputLimitBytes: req.OutputLimitBytes}
	if err := spec.Validate(); err != nil {
		return nil, 0, 0, err
	}
	if err := s.cfg.Policy.Check(who, spec, ""); err != nil {
		return nil, 0, 0, err
	}
	// The caps' defaults that are a run's time limits are not a
	// session's: its lease bounds it.
	spec.Args, spec.CPUTimeMs, spec.WallTimeMs = nil, 0, 0
	lease, err := msField("timeout_ms", req.TimeoutMs, defaultSessionTimeout, s.sessions.maxLease, "--session-max-timeout")
	if err != nil {
		return nil, 0, 0, err
	}
	idle, err := msField("idle_timeout_ms", req.IdleTimeoutMs, defaultSessionIdle, time.Duration(maxMs)*time.Millisecond, "")
	if err != nil {
		return nil, 0, 0, err
	}
	return spec, lease, idle, nil
}

// maxMs bounds a duration in milliseconds of a session's request.
const maxMs = 1e9

// msField reads a duration in milliseconds: 0 is def, beyond max (named
// by flag) is an error.
func msField(field string, ms int64, def, max time.Duration, flag string) (time.Duration, error) {
	if ms < 0 || ms > maxMs {
		return 0, &api.FieldError{Field: field, Msg: fmt.Sprintf("%d: must be 0 (the default) to %d ms", ms, int64(maxMs))}
	}
	d := time.Duration(ms) * time.Millisecond
	if d == 0 {
		d = min(def, max)
	}
	if d > max {
		return 0, &api.FieldError{Field: field, Msg: fmt.Sprintf("%d ms is beyond this service's maximum %d ms (%s)", ms, max.Milliseconds(), flag)}
	}
	return d, nil
}

// sessionEnv is a session's environment, as a run of spec would have it,
// which a command's own env adds to.
func sessionEnv(spec *api.Spec) []string {
	env := api.BaseEnv
	if spec.Lang != "" {
		if l, err := langs.Find(spec.Lang); err == nil {
			env = isolate.MergeEnv(env, l.Env)
		}
	}
	return isolate.MergeEnv(env, spec.Env)
}

func (s *Server) handleSessionCreate(w http.ResponseWriter, r *http.Request) {
	var req SessionRequest
	leave, ok := readBody(s, w, r, &req)
	if !ok {
		return
	}
	defer leave()
	who := callerOf(r)
	noteOf(r.Context()).ask(&api.Spec{MemoryBytes: req.MemoryBytes, Pids: req.Pids, CPUs: req.CPUs, TmpSizeBytes: req.TmpSizeBytes,
		FileSizeBytes: req.FileSizeBytes, OpenFiles: req.OpenFiles, StackBytes: req.StackBytes, OutputLimitBytes: req.OutputLimitBytes})
	spec, lease, idle, err := s.sessionSpec(&req, who)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	noteOf(r.Context()).settle(0, spec, nil)
	owner, account := ownerOf(who), who.Account()
	if err := s.sessions.reserve(account); err != nil {
		sessionErr(w, err)
		return
	}
	// Building the box takes a run slot, as a run's does.
	ctx, slots, ok := s.admit(w, r, 1)
	if !ok {
		s.sessions.unreserve(account)
		return
	}
	defer slots.done()
	box, err := s.sessions.host.StartSession(ctx, spec)
	slots.ran()
	if err != nil {
		s.sessions.unreserve(account)
		writeError(w, statusOf(err), err)
		return
	}
	sess := s.sessions.add(owner, account, box, sessionEnv(spec), lease, idle)
	if sess == nil {
		sessionErr(w, errStopping)
		return
	}
	noteOf(r.Context()).setSession(sess.id)
	sess.outputLimit = spec.WithDefaults().OutputLimitBytes
	if sess.outputLimit <= 0 || sess.outputLimit > s.maxOutput() {
		sess.outputLimit = s.maxOutput()
	}
	a := sess.answer(false)
	s.answer(w, http.StatusCreated, SessionAnswer{ID: a.ID, ExpiresAt: a.ExpiresAt, IdleExpiresAt: a.IdleExpiresAt, Metadata: sess.setMetadata(req.Metadata)})
}

// answer describes s; full adds its usage, processes and contexts.
func (s *session) answer(full bool) SessionAnswer {
	s.mu.Lock()
	created, last := s.created.UTC(), s.lastUsed.UTC()
	a := SessionAnswer{ID: s.id, CreatedAt: &created, ExpiresAt: s.expires.UTC(), IdleExpiresAt: s.lastUsed.Add(s.idle).UTC(), LastUsedAt: &last, Metadata: s.metadata}
	if full {
		a.Processes = []ProcessState{}
		for _, id := range s.order {
			p := s.procs[id]
			a.Processes = append(a.Processes, ProcessState{ID: id, Args: p.args, Running: !p.ended()})
		}
		a.Contexts = []ContextState{}
		for _, c := range s.contexts {
			a.Contexts = append(a.Contexts, c.state())
		}
		// Oldest first: "ctx-2" before "ctx-10".
		sort.Slice(a.Contexts, func(i, j int) bool {
			x, y := a.Contexts[i].ID, a.Contexts[j].ID
			return len(x) < len(y) || len(x) == len(y) && x < y
		})
	}
	s.mu.Unlock()
	if full {
		if u, err := s.box.Usage(); err == nil {
			a.Usage = &SessionUsage{CPUTime: u.CPUTime.Seconds(), MemoryBytes: u.MemoryBytes, MemoryPeak: u.MemoryPeak,
				Pids: u.Pids, PidsPeak: u.PidsPeak, OOMKills: u.OOMKills}
		}
	}
	return a
}

func (c *codeContext) state() ContextState {
	return ContextState{ID: c.id, Language: c.language, ExecutionCount: int(c.count.Load())}
}

func (s *Server) handleSessionList(w http.ResponseWriter, r *http.Request) {
	if s.handleSessionsAll(w, r, false) {
		return
	}
	list := []SessionAnswer{}
	want, ok := metadataFilter(w, r.URL.Query())
	if !ok {
		return
	}
	for _, sess := range s.sessions.list(ownerOf(callerOf(r))) {
		if sess.matches(want) {
			list = append(list, sess.answer(false))
		}
	}
	s.answer(w, http.StatusOK, map[string][]SessionAnswer{"sessions": list})
}

func (s *Server) handleSessionGet(w http.ResponseWriter, r *http.Request) {
	if s.handleSessionsAll(w, r, true) {
		return
	}
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	done() // a look at it is a use of it
	s.answer(w, http.StatusOK, sess.answer(true))
}

func (s *Server) handleSessionDelete(w http.ResponseWriter, r *http.Request) {
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	done()
	s.sessions.end(sess, nil)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleSessionTimeout(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	leave, ok := readBody(s, w, r, &req)
	if !ok {
		return
	}
	defer leave()
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	defer done()
	d, err := msField("timeout_ms", req.TimeoutMs, defaultSessionTimeout, s.sessions.maxLease, "--session-max-timeout")
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	s.answer(w, http.StatusOK, map[string]time.Time{"expires_at": sess.renew(d).UTC()})
}

// sessionCommand checks req and makes its command.
func (s *Server) sessionCommand(req *SessionCommandRequest, sess *session, who caller.Caller) (isolate.SessionCommand, error) {
	bad := func(field, format string, a ...any) error {
		return &api.FieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	cmd := isolate.SessionCommand{Args: req.Args, Cwd: req.Cwd, StderrToStdout: req.StderrToStdout, OutputLimit: req.OutputLimitBytes}
	if len(req.Args) == 0 || req.Args[0] == "" {
		return cmd, bad("args", "no program given")
	}
	for i, kv := range req.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t\x00") {
			return cmd, bad(fmt.Sprintf("env[%d]", i), "%q: expected NAME=VALUE", kv)
		}
	}
	if len(req.Env) > 0 {
		cmd.Env = isolate.MergeEnv(sess.env, req.Env)
	}
	if req.Cwd != "" && !path.IsAbs(req.Cwd) {
		return cmd, bad("cwd", "%q: must be an absolute path inside the box", req.Cwd)
	}
	if req.OutputLimitBytes < 0 || req.OutputLimitBytes > s.maxOutput() {
		return cmd, bad("output_limit_bytes", "%d: must be 0 (the session's) to %d, this service's maximum", req.OutputLimitBytes, s.maxOutput())
	}
	def := defaultCommandWall
	if req.Background {
		def = 0
	}
	wallCap := time.Duration(maxMs) * time.Millisecond
	if who.Capped() && s.cfg.Policy.Caps.WallTimeMs > 0 {
		// In the background too: its default (none) is the cap.
		wallCap = time.Duration(s.cfg.Policy.Caps.WallTimeMs) * time.Millisecond
		if req.Background {
			def = wallCap
		}
	}
	d, err := msField("timeout_ms", req.TimeoutMs, def, wallCap, "--max-wall-time")
	if err != nil {
		return cmd, err
	}
	cmd.WallTime = d
	if who.Capped() && s.cfg.Policy.Caps.CPUTimeMs > 0 {
		// Each of its processes within --max-time, in the background too.
		cmd.CPUTime = time.Duration(s.cfg.Policy.Caps.CPUTimeMs) * time.Millisecond
	}
	return cmd, nil
}

func (s *Server) handleSessionCommand(w http.ResponseWriter, r *http.Request) {
	var req SessionCommandRequest
	leave, ok := read(s, w, r, &req)
	if !ok {
		return
	}
	defer leave()
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	defer done()
	who := callerOf(r)
	cmd, err := s.sessionCommand(&req, sess, who)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if req.Background {
		if s.draining.Load() {
			sessionErr(w, errStopping)
			return
		}
		s.startBackground(w, r, who, sess, cmd, req.Stdin)
		return
	}
	// A command in the foreground takes a run slot while it runs, and
	// its captured output is held for its caller until it is answered;
	// held, it counts as a run of its caller's quota.
	held, ok := s.holdOutput(w, who, s.outputHeld(sess, cmd))
	if !ok {
		return
	}
	defer held.Release()
	if !s.startRuns(w, who, 1) {
		return
	}
	ctx, slots, ok := s.admit(w, r, 1)
	if !ok {
		return
	}
	defer slots.done()
	ctx, ev, end := s.streamIf(ctx, w, r, req.Stream || wantsStream(r))
	defer end()
	var stdio isolate.IO
	if req.Stdin != nil {
		stdio.Stdin = strings.NewReader(*req.Stdin)
	}
	if ev != nil {
		stdio.Stdout, stdio.Stderr = typedWriter{ev, "stdout"}, typedWriter{ev, "stderr"}
	}
	p, err := sess.box.Start(cmd, stdio)
	if err != nil {
		sessionErr(w, err)
		return
	}
	sp := &sessionProc{p: p, args: cmd.Args}
	if err := sess.addProc(sp); err == nil {
		defer sess.dropProc(p.ID())
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		// The client went away, or the service stops: the command is
		// the request's.
		p.Signal(syscall.SIGKILL)
	}
	rep := p.Wait()
	// Ran: the answer is all the request still holds.
	slots.ran()
	held.Shrink(reportKept(rep, s.streamLimit(sess, cmd)))
	req.Stdin = nil
	leave()
	s.ledger.ChargeCPU(who, CPUOf(rep))
	rep.Sandbox.Via = "service"
	rep.RequestID = requestID(r.Context())
	noteOf(r.Context()).settleSession(p.ID(), rep)
	if ev != nil {
		ev.emitValue(struct {
			Type string `json:"type"`
			*api.Report
		}{"report", rep})
		return
	}
	s.answer(w, http.StatusOK, rep)
}

// startBackground starts cmd with a stdin the service keeps (stdin, if
// any, written to it first) and answers its id; held, it counts as a run
// of who's quota. The command takes a run
// slot while it runs, as a foreground one does, and its account holds in
// the ledger its captured output: at its limit while it runs, as kept
// once it ended, until its record is dropped.
func (s *Server) startBackground(w http.ResponseWriter, r *http.Request, who caller.Caller, sess *session, cmd isolate.SessionCommand, stdin *string) {
	held, err := sess.holdBackground(s.ledger, caller.Usage{Bytes: s.outputHeld(sess, cmd), Background: 1})
	if err != nil {
		holdRefused(w, err)
		return
	}
	if !s.startRuns(w, who, 1) {
		held.Release()
		return
	}
	account := who.Account()
	if err := s.queue.acquireFor(r.Context(), account, 1); err != nil {
		held.Release()
		if errors.Is(err, errQueueFull) {
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, statusOf(err), err)
		return
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		s.queue.releaseFor(account, 1)
		held.Release()
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	p, err := sess.box.Start(cmd, isolate.IO{Stdin: rd})
	if err != nil {
		s.queue.releaseFor(account, 1)
		held.Release()
		rd.Close()
		wr.Close()
		sessionErr(w, err)
		return
	}
	sp := &sessionProc{p: p, args: cmd.Args, background: true, stdin: wr, stdinEnd: rd, held: held, streamLimit: s.streamLimit(sess, cmd)}
	sp.release = func() {
		s.queue.releaseFor(account, 1)
		s.ledger.ChargeCPU(who, CPUOf(p.Wait()))
	}
	id, start := requestID(r.Context()), time.Now()
	noteOf(r.Context()).started(p.ID())
	go func() {
		<-p.Done()
		sp.settle()
		// The read end first: a write blocked on the full pipe fails
		// (EPIPE) rather than wait for a reader that is gone.
		rd.Close()
		sp.closeStdin()
		s.auditBackground(who, sess.id, id, start, p.ID(), p.Wait())
	}()
	if err := sess.addProc(sp); err != nil {
		p.Signal(syscall.SIGKILL)
		held.Release()
		sessionErr(w, err)
		return
	}
	if stdin != nil && *stdin != "" {
		// Written in the background, before any later request's bytes:
		// the lock is taken here and given up by the writer.
		sp.stdinMu.Lock()
		go func() {
			defer sp.stdinMu.Unlock()
			io.WriteString(sp.stdin, *stdin)
		}()
	}
	s.answer(w, http.StatusCreated, map[string]any{"id": p.ID(), "running": true})
}

// streamLimit is what one captured stream of cmd keeps at most.
func (s *Server) streamLimit(sess *session, cmd isolate.SessionCommand) int64 {
	limit := cmd.OutputLimit
	if limit <= 0 {
		limit = sess.outputLimit
	}
	if limit <= 0 {
		limit = s.maxOutput()
	}
	return limit
}

// outputHeld is the most captured output a command of sess may make the
// service keep (a code call's as a command's of no options): its output
// limit for each stream it captures, and the marker where its head and
// tail meet.
func (s *Server) outputHeld(sess *session, cmd isolate.SessionCommand) int64 {
	stream := s.streamLimit(sess, cmd) + isolate.MaxCutMarkerBytes
	if cmd.StderrToStdout {
		return stream
	}
	return 2 * stream
}

// processOf is the request's session and command.
func (s *Server) processOf(w http.ResponseWriter, r *http.Request) (*session, *sessionProc, func(), bool) {
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return nil, nil, nil, false
	}
	id, err := strconv.ParseUint(r.PathValue("pid"), 10, 64)
	var sp *sessionProc
	if err == nil {
		sp = sess.proc(id)
	}
	if sp == nil {
		done()
		writeError(w, http.StatusNotFound, errors.New("no such command in this session (its record is kept while it runs, and for the last background commands)"))
		return nil, nil, nil, false
	}
	return sess, sp, done, true
}

func processState(sp *sessionProc) ProcessState {
	st := ProcessState{ID: sp.p.ID(), Args: sp.args, Running: !sp.ended()}
	if !st.Running {
		if sp.background {
			sp.settle()
		}
		rep := *sp.p.Wait() // a copy: the report is every request's
		rep.Sandbox.Via = "service"
		st.Report = &rep
	}
	return st
}

// settle gives back, once a background command has ended, its run slot
// and what its captured output does not keep; its report's bytes stay
// held until its record goes. Whoever sees the end first settles it.
func (p *sessionProc) settle() {
	p.settled.Do(func() {
		if p.release != nil {
			p.release()
		}
		rep := p.p.Wait()
		p.held.Shrink(reportKept(rep, p.streamLimit))
		p.held.EndBackground()
	})
}

func (s *Server) handleProcessGet(w http.ResponseWriter, r *http.Request) {
	_, sp, done, ok := s.processOf(w, r)
	if !ok {
		return
	}
	defer done()
	s.answer(w, http.StatusOK, processState(sp))
}

// handleProcessStdin appends the body to a background command's stdin,
// streamed; ?close=1 closes it after.
func (s *Server) handleProcessStdin(w http.ResponseWriter, r *http.Request) {
	_, sp, done, ok := s.processOf(w, r)
	if !ok {
		return
	}
	defer done()
	if !sp.background {
		writeError(w, http.StatusConflict, errors.New("the command runs in the foreground: its stdin was its request's"))
		return
	}
	closeAfter := r.URL.Query().Get("close")
	if closeAfter != "" && closeAfter != "0" && closeAfter != "1" {
		writeError(w, http.StatusBadRequest, &api.FieldError{Field: "close", Msg: "expected 0 or 1"})
		return
	}
	sp.stdinMu.Lock()
	f := sp.stdin
	if f == nil {
		sp.stdinMu.Unlock()
		writeError(w, http.StatusConflict, errors.New("the command's stdin is closed (the command ended, or ?close=1 closed it)"))
		return
	}
	// A command that reads nothing does not hold the request past its
	// client: the write gives up when the client goes.
	f.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(r.Context(), func() { f.SetWriteDeadline(time.Unix(1, 0)) })
	body, clear := streamedBody(w, r)
	n, err := io.Copy(f, body)
	clear()
	stop()
	sp.stdinMu.Unlock()
	if err != nil {
		writeError(w, http.StatusConflict, fmt.Errorf("the command's stdin took %d bytes, then: %w", n, err))
		return
	}
	if closeAfter == "1" {
		sp.closeStdin()
	}
	s.answer(w, http.StatusOK, map[string]int64{"written": n})
}

// signalNames are the signals a request may name.
var signalNames = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP,
	"QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "STOP": syscall.SIGSTOP, "CONT": syscall.SIGCONT,
}

func parseSignal(v any) (syscall.Signal, error) {
	bad := &api.FieldError{Field: "signal", Msg: fmt.Sprintf("%v: expected TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT or a number from 1 to 64", v)}
	switch x := v.(type) {
	case string:
		if sig, ok := signalNames[strings.TrimPrefix(strings.ToUpper(x), "SIG")]; ok {
			return sig, nil
		}
		if n, err := strconv.Atoi(x); err == nil && n >= 1 && n <= 64 {
			return syscall.Signal(n), nil
		}
	case float64:
		if x >= 1 && x <= 64 && x == float64(int(x)) {
			return syscall.Signal(int(x)), nil
		}
	}
	return 0, bad
}

func (s *Server) handleProcessSignal(w http.ResponseWriter, r *http.Request) {
	var req signalRequest
	leave, ok := read(s, w, r, &req)
	if !ok {
		return
	}
	defer leave()
	sig, err := parseSignal(req.Signal)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	_, sp, done, ok := s.processOf(w, r)
	if !ok {
		return
	}
	defer done()
	if sp.ended() {
		writeError(w, http.StatusConflict, errors.New("the command has ended"))
		return
	}
	if err := sp.p.Signal(sig); err != nil {
		sessionErr(w, err)
		return
	}
	s.answer(w, http.StatusOK, map[string]bool{"running": !sp.ended()})
}

// maxWait bounds how long one wait request waits.
const maxWait = 10 * time.Minute

func (s *Server) handleProcessWait(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	leave, ok := readBody(s, w, r, &req)
	if !ok {
		return
	}
	// A waiter holds no place of the service's: waits as long as ten
	// minutes would take every one.
	leave()
	d, err := msField("timeout_ms", req.TimeoutMs, maxWait, maxWait, "at most 10 minutes a request")
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	_, sp, done, ok := s.processOf(w, r)
	if !ok {
		return
	}
	// Waiting is a use, as any request in progress; the lease still
	// ends the session, and the command with it.
	defer done()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-sp.p.Done():
	case <-t.C:
		s.answer(w, http.StatusOK, ProcessState{ID: sp.p.ID(), Args: sp.args, Running: true})
		return
	case <-r.Context().Done():
		return
	}
	st := processState(sp)
	// The report itself, with the command's id and args beside it.
	s.answer(w, http.StatusOK, struct {
		ID      uint64   `json:"id"`
		Args    []string `json:"args"`
		Running bool     `json:"running"`
		*api.Report
	}{st.ID, st.Args, false, st.Report})
}

func (s *Server) handleContextCreate(w http.ResponseWriter, r *http.Request) {
	var req contextRequest
	leave, ok := readBody(s, w, r, &req)
	if !ok {
		return
	}
	defer leave()
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	defer done()
	c, err := sess.newContext(req.Language, false)
	if err != nil {
		contextErr(w, err)
		return
	}
	s.answer(w, http.StatusCreated, ContextState{ID: c.id, Language: c.language})
}

var errNoCode = errors.New("this service's sessions run no code contexts")

func contextErr(w http.ResponseWriter, err error) {
	if errors.Is(err, errNoCode) {
		writeError(w, http.StatusNotImplemented, err)
		return
	}
	sessionErr(w, err)
}

// newContext starts an interpreter context of language (default
// python); asDefault makes it the session's default context of its
// language (the one /code uses without "context").
func (s *session) newContext(language string, asDefault bool) (*codeContext, error) {
	language, err := codecontext.CodeLanguage(language)
	if err != nil {
		return nil, err
	}
	cb, ok := s.box.(CodeBox)
	if !ok {
		return nil, errNoCode
	}
	s.mu.Lock()
	if asDefault && s.defaultCtx[language] != "" {
		c := s.contexts[s.defaultCtx[language]]
		s.mu.Unlock()
		if c != nil {
			return c, nil
		}
		return nil, errNoSession
	}
	if len(s.contexts) >= maxContexts {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %d contexts in this session already", errSessionCap, maxContexts)
	}
	s.nextContext++
	id := "ctx-" + strconv.Itoa(s.nextContext)
	// Reserved before it starts, so that two first uses make one default.
	c := &codeContext{id: id, language: language}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.contexts[id] = c
	if asDefault {
		if s.defaultCtx == nil {
			s.defaultCtx = map[string]string{}
		}
		s.defaultCtx[language] = id
	}
	s.mu.Unlock()
	cc, err := cb.NewCodeContext(language)
	if err != nil {
		s.mu.Lock()
		delete(s.contexts, id)
		if s.defaultCtx[language] == id {
			delete(s.defaultCtx, language)
		}
		s.mu.Unlock()
		return nil, err
	}
	c.ccMu.Lock()
	c.cc = cc
	c.ccMu.Unlock()
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	if ended {
		cc.Close()
		return nil, isolate.ErrSessionEnded
	}
	return c, nil
}

func (s *session) context(id string) *codeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contexts[id]
}

func (s *Server) handleContextDelete(w http.ResponseWriter, r *http.Request) {
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	defer done()
	id := r.PathValue("cid")
	sess.mu.Lock()
	c := sess.contexts[id]
	delete(sess.contexts, id)
	if c != nil && sess.defaultCtx[c.language] == id {
		delete(sess.defaultCtx, c.language)
	}
	sess.mu.Unlock()
	if c == nil {
		writeError(w, http.StatusNotFound, errors.New("no such context in this session"))
		return
	}
	// Code it runs is ended with it: its call answers that the context
	// was deleted.
	if cc := c.context(); cc != nil {
		cc.Close()
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleCode(w http.ResponseWriter, r *http.Request) {
	var req CodeRequest
	leave, ok := read(s, w, r, &req)
	if !ok {
		return
	}
	defer leave()
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	defer done()
	d, err := msField("timeout_ms", req.TimeoutMs, defaultCommandWall, time.Duration(maxMs)*time.Millisecond, "")
	if err == nil && callerOf(r).Capped() && s.cfg.Policy.Caps.WallTimeMs > 0 {
		d, err = msField("timeout_ms", req.TimeoutMs, defaultCommandWall, time.Duration(s.cfg.Policy.Caps.WallTimeMs)*time.Millisecond, "--max-wall-time")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	opts := codecontext.CallOptions{Env: req.Env, Cwd: req.Cwd}
	if err := opts.Check(); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	var c *codeContext
	if req.Context == "" {
		c, err = sess.newContext(req.Language, true)
	} else if c = sess.context(req.Context); c == nil {
		err = &api.FieldError{Field: "context", Msg: "no such context in this session"}
	}
	if err != nil {
		var fe *api.FieldError
		if errors.As(err, &fe) && fe.Field == "context" {
			writeError(w, http.StatusNotFound, err)
			return
		}
		contextErr(w, err)
		return
	}
	// The call's captured output is held for its caller until it is
	// answered; its rich results too, once they came.
	limit := s.streamLimit(sess, isolate.SessionCommand{})
	held, ok := s.holdOutput(w, callerOf(r), s.outputHeld(sess, isolate.SessionCommand{}))
	if !ok {
		return
	}
	defer held.Release()
	if !s.startRuns(w, callerOf(r), 1) {
		return
	}
	ctx, slots, ok := s.admit(w, r, 1)
	if !ok {
		return
	}
	defer slots.done()
	ctx, ev, end := s.streamIf(ctx, w, r, req.Stream || wantsStream(r))
	defer end()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var onStdout, onStderr func(string)
	if ev != nil {
		onStdout = func(s string) {
			ev.live("stdout", TypedEvent{Type: "stdout", Data: s}, TypedEvent{Type: "stdout", Cut: true})
		}
		onStderr = func(s string) {
			ev.live("stderr", TypedEvent{Type: "stderr", Data: s}, TypedEvent{Type: "stderr", Cut: true})
		}
	}
	start := time.Now()
	c.mu.Lock()
	cc := c.context()
	if cc == nil || sess.context(c.id) != c { // its start failed, or it was deleted meanwhile
		c.mu.Unlock()
		writeError(w, http.StatusNotFound, &api.FieldError{Field: "context", Msg: "no such context in this session"})
		return
	}
	if ev != nil {
		ctx = codecontext.WithResultHandler(ctx, func(r codecontext.Result) {
			ev.emitValue(struct {
				Type string `json:"type"`
				codecontext.Result
			}{"result", r})
		})
	}
	ex, err := cc.Run(codecontext.WithCallOptions(ctx, opts), req.Code, onStdout, onStderr)
	// Ran: the answer is all the request still holds. Rich results past
	// the caller's budget keep the request's place while they are
	// written: the places bound them then.
	slots.ran()
	req.Code = ""
	if ex != nil {
		held.Shrink(streamsKept(len(ex.Stdout), len(ex.Stderr), limit))
		if held.Grow(resultsKept(ex.Results)) == nil {
			leave()
		}
	}
	// Code running when its session ends answers as a command does
	// then: the session has ended (its context with it).
	// (Its context may be closed with it before the call sees the end.)
	if sess.hasEnded() && (err != nil || ex.Error != nil && ex.Error.Name == codecontext.ErrorContextDied) {
		if ex == nil {
			ex = &Execution{}
		}
		ex.Error, err = &ExecError{Name: codecontext.ErrorContextDied, Value: isolate.ErrSessionEnded.Error()}, nil
	}
	deleted := err != nil && sess.context(c.id) != c
	if deleted {
		err = &api.FieldError{Field: "context", Msg: "the context was deleted while the code ran"}
	}
	if err == nil {
		c.count.Store(int64(ex.ExecutionCount))
	}
	c.mu.Unlock()
	switch {
	case err != nil && ev != nil && ev.started():
		ev.emitValue(TypedEvent{Type: "error", Error: err.Error()})
		return
	case deleted:
		writeError(w, http.StatusNotFound, err)
		return
	case err != nil:
		contextErr(w, err)
		return
	}
	a := CodeAnswer{Execution: *ex, Context: c.id, WallTime: time.Since(start).Seconds()}
	if ev != nil {
		a.Type = "execution"
		ev.emitValue(a)
		return
	}
	s.answer(w, http.StatusOK, a)
}

// boxPath is a session file's path from the URL: relative to /box, or
// absolute ("files/%2Ftmp/x", "files//tmp/x"); empty: /box.
func boxPath(r *http.Request) string {
	p := r.PathValue("path")
	if p == "" {
		return "/box"
	}
	return p
}

func (s *Server) handleSessionFilePut(w http.ResponseWriter, r *http.Request) {
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	defer done()
	mode := os.FileMode(0o644)
	if v := r.URL.Query().Get("mode"); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m&^0o777 != 0 {
			writeError(w, http.StatusBadRequest, &api.FieldError{Field: "mode", Msg: fmt.Sprintf("%q: expected permission bits in octal (0 to 0777)", v)})
			return
		}
		mode = os.FileMode(m)
	}
	// Streamed from the body to the box's file: the box's own file
	// system bounds it, not the service's memory.
	body, clear := streamedBody(w, r)
	n, err := sess.box.WriteFile(boxPath(r), body, mode)
	clear()
	if err != nil {
		fileErr(w, err)
		return
	}
	s.answer(w, http.StatusOK, map[string]any{"path": boxPath(r), "size": n})
}

func (s *Server) handleSessionFileGet(w http.ResponseWriter, r *http.Request) {
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	defer done()
	q := r.URL.Query()
	p := boxPath(r)
	switch {
	case q.Get("stat") == "1":
		info, err := sess.box.Stat(p)
		if err != nil {
			fileErr(w, err)
			return
		}
		s.answer(w, http.StatusOK, info)
		return
	case q.Get("list") == "1":
		entries, err := sess.box.List(p, maxListEntries)
		if err != nil {
			fileErr(w, err)
			return
		}
		if entries == nil {
			entries = []isolate.FileInfo{}
		}
		s.answer(w, http.StatusOK, map[string][]isolate.FileInfo{"entries": entries})
		return
	}
	f, info, err := sess.box.OpenFile(p)
	if err != nil {
		fileErr(w, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.WriteHeader(http.StatusOK)
	// Streamed in pieces, each within the write timeout: a client that
	// stops reading lets the request go.
	rc := http.NewResponseController(w)
	buf := make([]byte, 64<<10)
	for left := info.Size; left > 0; {
		n, err := f.Read(buf[:min(int64(len(buf)), left)])
		if n > 0 {
			rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			left -= int64(n)
		}
		if err != nil {
			return
		}
	}
}

func (s *Server) handleSessionFileDelete(w http.ResponseWriter, r *http.Request) {
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	defer done()
	if err := sess.box.Remove(boxPath(r)); err != nil {
		fileErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

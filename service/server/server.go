// Package server is the transport of `isolate serve`: HTTP/JSON handlers
// over a Runner (the pool of fresh boxes), request decoding and limits,
// streaming, the file store's endpoints, authentication, the queue and
// the metrics. It adds no runtime logic: every command is an api.Spec and
// a Runner.Run, every result the CLI's report.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/internal/connlimit"
	"github.com/isolate-sandbox/isolate/internal/jsonout"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/codecontext"
	"github.com/isolate-sandbox/isolate/service/caller"
	"github.com/isolate-sandbox/isolate/service/filestore"
)

// Runner runs one command in a fresh box (isolate.Host, or the pool in
// front of it).
type Runner interface {
	Run(ctx context.Context, spec *api.Spec, stdio isolate.IO) (*api.Report, error)
	// Ready is the number of boxes built ahead and waiting.
	Ready() int
}

// Execer compiles and runs one source file (the judge package).
type Execer interface {
	Exec(ctx context.Context, req *ExecRequest, stdio isolate.IO) (*api.ExecReport, error)
}

// Health is what GET /v1/health answers.
type Health struct {
	Ready   bool     `json:"ready"`
	Reasons []string `json:"reasons,omitempty"` // why not ready
	Cgroup  string   `json:"cgroup"`            // v1, v2 or hybrid
	Images  []string `json:"images"`            // built language images
	Langs   []string `json:"langs"`             // languages whose image is built (what /v1/exec can run)
	// CodeLanguages are what a session's code context speaks (its
	// program must be in the session's image).
	CodeLanguages []string `json:"code_languages"`
	Pool          int      `json:"pool"`    // boxes ready
	Running       int      `json:"running"` // commands running
	Waiting       int      `json:"waiting"` // requests queued
	Drain         bool     `json:"draining"`
}

// Config is a service's settings.
type Config struct {
	Runner   Runner
	Exec     Execer // nil: /v1/exec answers 501
	Store    *filestore.Store
	Version  string
	Parallel int // commands at once
	Queue    int // requests waiting beyond Parallel; more get 429
	// Policy is what callers who are not root may ask, and the caps.
	Policy caller.Policy
	// Health fills what only the host knows (cgroup mode, images).
	Health func() Health
	// Token, when set, is required as a bearer token on every request
	// (mandatory for TCP listeners; see Serve).
	Token string
	// Metrics are more collectors for /metrics (the binary's own).
	Metrics []prometheus.Collector

	// Bounds of the service's own resources, whatever a request asks
	// (0: the default).
	MaxBodyBytes int64            // a request's body (DefaultMaxBodyBytes)
	WriteTimeout time.Duration    // how long an answer, or a streamed event, waits for its client to read (DefaultWriteTimeout)
	Conns        connlimit.Limits // connections held at once, in all and per uid (TCP: per token, per address until a request carried it)

	// Sessions starts the boxes of /v1/sessions (nil: those endpoints
	// answer 501), at most MaxSessions at once in all and
	// MaxSessionsPerCaller per caller, each leased for at most
	// SessionMaxTimeout (0: the defaults).
	Sessions             SessionHost
	MaxSessions          int
	MaxSessionsPerCaller int
	SessionMaxTimeout    time.Duration

	// Audit writes the audit trail (nil: lines only feed the per-caller
	// metrics).
	Audit *Auditor
	// Ledger is what each caller holds in the service at once (nil: a
	// ledger of the default budget).
	Ledger *caller.Ledger
}

// Defaults of the service's own bounds.
const (
	// DefaultWriteTimeout: a client that reads nothing of its answer for
	// this long is gone; its run is cancelled and its slots freed.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultMaxOutputBytes caps output_limit_bytes (and a collected
	// stream's max_bytes) when the service sets no --max-output: what one
	// stream of one command may make the service hold.
	DefaultMaxOutputBytes = 16 << 20
)

// readTimeout bounds how long a client may take to send a request's body
// (a streamed one: deadlineBody).
var readTimeout = 30 * time.Second

// Server is one service: its handlers, queue and metrics.
type Server struct {
	cfg     Config
	runner  Runner
	store   *filestore.Store
	queue   *queue
	metrics *metrics
	mux     *http.ServeMux

	// places are the requests in the service at once (read, queued or
	// running): Parallel + Queue. Beyond them a request gets 429 before
	// its body is read: the service holds at most that many bodies.
	places chan struct{}
	// placesMu guards placesBy: the places each account but root's
	// holds, at most half of them (maxPlacesPerCaller): one caller's
	// slow or stalled bodies leave the other half to everyone else.
	placesMu sync.Mutex
	placesBy map[string]int

	draining atomic.Bool
	// drained ends when the drain begins: requests still waiting for a
	// slot then get 503 at once.
	drained   context.Context
	stopTaken context.CancelCauseFunc
	inflight  sync.WaitGroup // requests that run commands
	// base is the context of every command: cancelled when a drain's
	// grace period ends, so that nothing outlives the service.
	base   context.Context
	cancel context.CancelCauseFunc

	sessions *sessions // nil without cfg.Sessions
	audit    *Auditor
	ledger   *caller.Ledger

	mu      sync.Mutex
	servers []*http.Server
	limited []*connlimit.Listener
}

// New makes a service from cfg.
func New(cfg Config) *Server {
	if cfg.Parallel <= 0 {
		cfg.Parallel = 1
	}
	if cfg.Queue < 0 {
		cfg.Queue = 0
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Policy.Caps.OutputLimitBytes <= 0 {
		cfg.Policy.Caps.OutputLimitBytes = DefaultMaxOutputBytes
	}
	s := &Server{cfg: cfg, runner: cfg.Runner, store: cfg.Store, queue: newQueue(cfg.Parallel, cfg.Queue), mux: http.NewServeMux(),
		places: make(chan struct{}, cfg.Parallel+cfg.Queue), placesBy: map[string]int{}}
	s.base, s.cancel = context.WithCancelCause(context.Background())
	s.drained, s.stopTaken = context.WithCancelCause(context.Background())
	if s.audit = cfg.Audit; s.audit == nil {
		s.audit = NewAuditor()
	}
	s.ledger = cfg.Ledger
	if s.ledger == nil {
		s.ledger = caller.NewLedger(caller.Budget{Bytes: caller.DefaultHeldBytes, TotalBytes: caller.DefaultTotalHeldBytes, Background: caller.DefaultBackground})
	}
	if cfg.Sessions != nil {
		s.sessions = newSessions(&cfg)
	}
	s.metrics = newMetrics(s)
	handle := func(pattern, endpoint string, h http.HandlerFunc) {
		s.mux.HandleFunc(pattern, s.audited(pattern, s.metrics.observe(endpoint, h)))
	}
	handle("POST /v1/run", "run", s.handleRun)
	handle("POST /v1/exec", "exec", s.handleExec)
	handle("POST /v1/files", "files", s.handleFilePut)
	handle("GET /v1/files/{id}", "files", s.handleFileGet)
	handle("DELETE /v1/files/{id}", "files", s.handleFileDelete)
	handle("GET /v1/health", "health", s.handleHealth)
	handle("GET /v1/version", "version", s.handleVersion)
	handle("GET /v1/limits", "limits", s.handleLimits)
	s.registerSessions(handle)
	s.mux.HandleFunc("GET /metrics", s.audited("GET /metrics", s.metrics.handler().ServeHTTP))
	return s
}

// Handler is the service's HTTP handler, with the token check when the
// configuration has a token.
func (s *Server) Handler() http.Handler {
	h := absoluteBoxPaths(s.mux)
	if s.cfg.Token != "" {
		return s.auditRefused(requireToken(s.cfg.Token, h))
	}
	return h
}

// Serve answers requests on l until Shutdown. A TCP listener needs a
// token: nothing but the unix socket's permissions stands between a
// client and root's sandbox otherwise. Connections beyond the limits
// (cfg.Conns) are closed as they come; running out of descriptors pauses
// the accept loop, never ends it.
func (s *Server) Serve(l net.Listener) error {
	if _, unixSocket := l.(*net.UnixListener); !unixSocket && s.cfg.Token == "" {
		return errors.New("refusing to listen on TCP without a token (--token-file)")
	}
	hs := &http.Server{
		Handler:     s.Handler(),
		ConnContext: connContext,
		// A connection waiting for its next request makes room for a
		// new one of its peer's: keep-alive never locks a client out.
		ConnState: func(c net.Conn, st http.ConnState) {
			connlimit.Idle(c, st == http.StateIdle)
		},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	limited := connlimit.New(l, s.cfg.Conns)
	s.mu.Lock()
	s.servers = append(s.servers, hs)
	s.limited = append(s.limited, limited)
	s.mu.Unlock()
	err := hs.Serve(limited)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Ledger is what each caller holds in the service (caller.Ledger).
func (s *Server) Ledger() *caller.Ledger { return s.ledger }

// Connections are the connections held now, those closed at once for
// being beyond the limits, and the accepts that found no descriptor.
func (s *Server) Connections() (held int, refused, starved int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return connlimit.Totals(s.limited)
}

// Drain makes the service take no more runs: new requests, and those
// still waiting for a slot, get 503 with Retry-After at once; running
// ones go on. The health answer says "draining" (not ready).
func (s *Server) Drain() {
	s.draining.Store(true)
	s.stopTaken(errStopping)
}

// Draining tells whether Drain was called.
func (s *Server) Draining() bool { return s.draining.Load() }

// Shutdown drains: new requests and those waiting for a slot get 503 at
// once, running ones finish within grace; then whatever still runs is
// cancelled (its boxes killed), every session ends, and the listeners
// close.
func (s *Server) Shutdown(grace time.Duration) {
	s.Drain()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.cancel(errors.New("the service is stopping"))
		<-done
	}
	s.cancel(errors.New("the service stopped"))
	if s.sessions != nil {
		s.sessions.closeAll()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, hs := range s.servers {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		hs.Shutdown(ctx)
		cancel()
		hs.Close()
	}
}

// read takes a place in the service for a request (429 when there is
// none) and decodes its body into v within the service's bounds (413
// past the body's, 400 for the rest). It answers the client itself when
// it fails; leave gives the place back (once: a request whose commands
// ended leaves before its answer is written, see admit).
func read[T any](s *Server, w http.ResponseWriter, r *http.Request, v *T) (leave func(), ok bool) {
	if r.ContentLength > s.cfg.MaxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, errBodyTooLarge{s.cfg.MaxBodyBytes})
		return nil, false
	}
	// Root's requests are the operator's: no share (account "").
	account := ""
	if who := callerOf(r); !who.Root() {
		account = who.Account()
	}
	if !s.takePlace(account) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, fmt.Errorf("%w: this caller holds %d of the service's %d requests already, its share", errQueueFull, s.maxPlacesPerCaller(), cap(s.places)))
		return nil, false
	}
	select {
	case s.places <- struct{}{}:
	default:
		s.givePlace(account)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, fmt.Errorf("%w: the service holds %d requests already", errQueueFull, cap(s.places)))
		return nil, false
	}
	var left sync.Once
	leave = func() { left.Do(func() { <-s.places; s.givePlace(account) }) }
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(readTimeout))
	err := decode(r.Body, v, s.cfg.MaxBodyBytes, s.maxCommands())
	// The connection's reads watch for the client going away from now on:
	// a deadline passing would end the run.
	rc.SetReadDeadline(time.Time{})
	if err != nil {
		leave()
		writeError(w, statusOf(err), err)
		return nil, false
	}
	return leave, true
}

// maxPlacesPerCaller is the most places one account holds at once: half
// the service's (--parallel + --queue), at least one.
func (s *Server) maxPlacesPerCaller() int { return max(1, cap(s.places)/2) }

// takePlace counts a place of account's, unless it holds its share.
func (s *Server) takePlace(account string) bool {
	if account == "" {
		return true
	}
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	if s.placesBy[account] >= s.maxPlacesPerCaller() {
		return false
	}
	s.placesBy[account]++
	return true
}

func (s *Server) givePlace(account string) {
	if account == "" {
		return
	}
	s.placesMu.Lock()
	defer s.placesMu.Unlock()
	if s.placesBy[account]--; s.placesBy[account] <= 0 {
		delete(s.placesBy, account)
	}
}

// maxCommands is the most commands one request may run.
func (s *Server) maxCommands() int {
	if s.cfg.Policy.Caps.Commands > 0 {
		return min(s.cfg.Parallel, s.cfg.Policy.Caps.Commands)
	}
	return s.cfg.Parallel
}

// maxOutput is the most bytes one captured stream may keep (New sets
// the default cap).
func (s *Server) maxOutput() int64 { return s.cfg.Policy.Caps.OutputLimitBytes }

// answer sends a request's answer, within the write timeout: a client
// that does not read it does not hold the request's slots for longer.
func (s *Server) answer(w http.ResponseWriter, code int, v any) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	writeJSON(w, code, v)
}

// admit lets a request that runs n commands in: not while draining (503),
// not beyond the queue (429); else it waits for its slots. It answers
// the client itself when it refuses. The request gives its slots back
// with a.ran once its commands ended, before its answer is written: a
// client that reads its answer slowly, or not at all, holds no run slot
// of the service's. a.done ends the request.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, n int) (ctx context.Context, a *admitted, ok bool) {
	s.inflight.Add(1)
	if s.draining.Load() {
		s.inflight.Done()
		w.Header().Set("Retry-After", "1")
		writeError(w, statusOf(errStopping), errStopping)
		return nil, nil, false
	}
	ctx, cancel := s.requestContext(r)
	account := callerOf(r).Account()
	if err := s.acquire(ctx, account, n); err != nil {
		cancel()
		s.inflight.Done()
		code := statusOf(err)
		if errors.Is(err, errQueueFull) || code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, code, err)
		return nil, nil, false
	}
	// The request's boxes end once its answer is sent (isolate.EndAfter):
	// done sends what the answer still buffers first.
	answered := make(chan struct{})
	a = &admitted{release: func() { s.queue.releaseFor(account, n) }}
	a.end = func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		close(answered)
		a.ran()
		cancel()
		s.inflight.Done()
	}
	return isolate.EndAfter(ctx, answered), a, true
}

// admitted is a request let in: its slots, then the request itself.
type admitted struct {
	once    sync.Once
	release func()
	end     func()
}

// ran gives the request's slots back (once): its commands ended.
func (a *admitted) ran() { a.once.Do(a.release) }

// done ends the request (its slots too, if ran did not).
func (a *admitted) done() { a.end() }

// Slot waits for one of the service's run slots, as a request of one
// command does (--parallel, then --queue), for a front end outside HTTP
// (the CLI's handover); release gives it back.
func (s *Server) Slot(ctx context.Context) (release func(), err error) {
	return s.SlotFor(ctx, caller.Caller{Via: caller.Process, UID: -1})
}

// SlotFor is Slot for who: its account's waiters are served as an API
// caller's are (queue).
func (s *Server) SlotFor(ctx context.Context, who caller.Caller) (release func(), err error) {
	if s.draining.Load() {
		return nil, errStopping
	}
	account := who.Account()
	if err := s.acquire(ctx, account, 1); err != nil {
		if errors.Is(err, errQueueFull) {
			return nil, errors.New("the service is busy: every run slot is taken and its queue is full (--parallel, --queue); try again")
		}
		return nil, err
	}
	return func() { s.queue.releaseFor(account, 1) }, nil
}

// acquire waits for n slots of account's, until ctx ends or the drain
// begins (errStopping).
func (s *Server) acquire(ctx context.Context, account string, n int) error {
	wait, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	unhook := context.AfterFunc(s.drained, func() { stop(errStopping) })
	defer unhook()
	if err := s.queue.acquireFor(wait, account, n); err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}
	return nil
}

// requestContext is the request's context (cancelled when its client goes
// away), also cancelled when the service stops.
func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(r.Context())
	stop := context.AfterFunc(s.base, func() { cancel(context.Cause(s.base)) })
	return ctx, func() { stop(); cancel(nil) }
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	var h Health
	if s.cfg.Health != nil {
		h = s.cfg.Health()
	}
	h.Pool = s.runner.Ready()
	h.CodeLanguages = codecontext.CodeLanguages
	h.Running, h.Waiting = s.queue.lengths()
	h.Drain = s.draining.Load()
	if h.Drain {
		h.Ready = false
		h.Reasons = append(h.Reasons, "draining: the service is stopping")
	}
	code := http.StatusOK
	if !h.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": s.cfg.Version, "api": "v1"})
}

// errorBody is every error's JSON: the message, and the field at fault
// when the request had a bad one.
type errorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

func writeError(w http.ResponseWriter, code int, err error) {
	body := errorBody{Error: err.Error()}
	var fe *api.FieldError
	if errors.As(err, &fe) {
		body.Field = fe.Field
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	a, err := encodeAnswer(v)
	if err != nil {
		code, a = http.StatusInternalServerError, nil
	}
	w.Header().Set("Content-Type", "application/json")
	if a == nil {
		const failed = `{"error":"the answer could not be encoded"}` + "\n"
		w.Header().Set("Content-Length", strconv.Itoa(len(failed)))
		w.WriteHeader(code)
		io.WriteString(w, failed)
		return
	}
	// With its length known the answer goes out whole at the request's
	// end (admit's flush), not chunked with its last chunk after it. A
	// large one goes out in pieces as it is encoded.
	if n := a.Size(); n >= 0 {
		w.Header().Set("Content-Length", strconv.Itoa(n))
	}
	w.WriteHeader(code)
	a.Write(w)
}

// statusOf is the HTTP status of a request's error: what this caller may
// not ask (403), the client's mistake (400, a hold beyond the budget by
// itself too), busy (429), stopping (503), or the service's (500).
func statusOf(err error) int {
	var fe *api.FieldError
	var ue *api.UsageError
	var refused *caller.Refusal
	switch {
	case errors.As(err, &refused):
		return http.StatusForbidden
	case errors.As(err, &fe), errors.As(err, &ue), errors.Is(err, caller.ErrNeverFits):
		return http.StatusBadRequest
	case errors.Is(err, errQueueFull), errors.Is(err, caller.ErrOverBudget):
		return http.StatusTooManyRequests
	case errors.As(err, new(errBodyTooLarge)):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errStopping):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// encodeAnswer encodes an answer as one line of JSON, HTML left
// unescaped, its large strings written in pieces (jsonout).
func encodeAnswer(v any) (*jsonout.Encoded, error) { return jsonout.Encode(v, jsonout.Options{}) }

// startRuns counts n runs of who against its quota (caller.Ledger); over
// it, it answers 429 with Retry-After itself and says false.
func (s *Server) startRuns(w http.ResponseWriter, who caller.Caller, n int) bool {
	err := s.ledger.StartRuns(who, n)
	var oq *caller.OverQuota
	if errors.As(err, &oq) {
		w.Header().Set("Retry-After", strconv.Itoa(oq.RetrySeconds()))
		writeError(w, http.StatusTooManyRequests, err)
		return false
	}
	return true
}

// CPUOf is the CPU time a report measured: what a run charges to its
// caller's quota (caller.Ledger.ChargeCPU).
func CPUOf(r *api.Report) time.Duration {
	if r == nil {
		return 0
	}
	return time.Duration(r.CPUTime * float64(time.Second))
}

package server

// The audit trail: one JSON line per request (and one per session command
// that runs in the background, when it ends), written where the request
// settles: who asked (the caller as the kernel or the token says), through
// which front end and endpoint, what it asked and what it was granted,
// how it ended and what it used, and the request's id, which its answer
// carries too (the X-Request-Id header, a report's request_id). Lines go
// to the service's standard error (the journal) and, with --audit-file, to
// that file. The same lines feed the per-caller usage metrics.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate/egress"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// RequestIDHeader is the header of every answer that names its request.
const RequestIDHeader = "X-Request-Id"

// Front ends, as audit lines name them.
const (
	FrontAPI      = "api"      // the HTTP API: the unix socket or TCP (caller.via says which)
	FrontSession  = "session"  // the API's /v1/sessions endpoints
	FrontQueue    = "queue"    // a job of the Redis queue
	FrontHandover = "handover" // the CLI's command line handed over
	FrontMCP      = "mcp"      // a tool call over MCP (HandlerAs)
)

// AuditCaller is who sent a request.
type AuditCaller struct {
	Via string `json:"via"` // api, tcp, handover, queue
	UID int    `json:"uid"` // -1: nobody vouches (TCP, queue)
	GID int    `json:"gid"`
	// Owner is what the caller's sessions and usage are counted by: a
	// uid ("uid:1000"), the token's callers ("tcp"), the queue's jobs.
	Owner string `json:"owner"`
	// Addr is a TCP caller's address.
	Addr string `json:"addr,omitempty"`
}

// AuditCommand is one command of a request: its image, its limits as
// asked and as granted (caps and defaults applied), and how it ended.
type AuditCommand struct {
	Image      string         `json:"image,omitempty"`
	Asked      map[string]any `json:"asked,omitempty"`
	Granted    map[string]any `json:"granted,omitempty"`
	Status     string         `json:"status,omitempty"`
	CPUTime    float64        `json:"cpu_time"`
	MemoryPeak int64          `json:"memory_peak"`
	WallTime   float64        `json:"wall_time"`
	BoxID      int            `json:"box_id"`
	// Process is a session command's id.
	Process uint64 `json:"process,omitempty"`
	// Network is what a box with an allowlist reached and was refused:
	// each connection's host, port, verdict and bytes.
	Network *egress.Report `json:"network,omitempty"`
}

// AuditLine is one line of the audit trail.
type AuditLine struct {
	Time      time.Time   `json:"time"`
	RequestID string      `json:"request_id"`
	FrontEnd  string      `json:"front_end"`
	Endpoint  string      `json:"endpoint"` // "POST /v1/run", the handover's "run"
	Caller    AuditCaller `json:"caller"`
	Session   string      `json:"session,omitempty"`
	// Code is the HTTP status of the answer; Exit the handed-over CLI's
	// exit status.
	Code int  `json:"http_status,omitempty"`
	Exit *int `json:"exit,omitempty"`
	// Verdict is how the request ended: its commands' status (the first
	// that is not OK), or, for a request that ran none, ok, started,
	// refused (403), bad_request, not_found, busy (429), stopping, error.
	Verdict  string         `json:"verdict"`
	Error    string         `json:"error,omitempty"`
	Duration float64        `json:"duration"` // seconds, from the request's arrival to its settling
	Commands []AuditCommand `json:"commands,omitempty"`
}

// Auditor writes audit lines, each whole, to its writers, and counts
// what each caller used (for the metrics).
type Auditor struct {
	mu    sync.Mutex
	out   []io.Writer
	usage callerUsage
}

// NewAuditor writes lines to out (none: the lines only feed the
// metrics).
func NewAuditor(out ...io.Writer) *Auditor {
	return &Auditor{out: out, usage: callerUsage{byOwner: map[string]*usage{}}}
}

// Write writes l as one line of JSON and counts its usage.
func (a *Auditor) Write(l *AuditLine) {
	if a == nil {
		return
	}
	if l.Time.IsZero() {
		l.Time = time.Now()
	}
	l.Time = l.Time.UTC()
	b, err := json.Marshal(l)
	if err != nil {
		return
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.out {
		w.Write(b)
	}
	a.usage.add(l)
}

// NewRequestID is a request's id: 96 random bits, in hex.
func NewRequestID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AuditCallerOf is c as an audit line names it.
func AuditCallerOf(c caller.Caller) AuditCaller {
	return AuditCaller{Via: string(c.Via), UID: c.UID, GID: c.GID, Owner: ownerOf(c)}
}

// AuditCommandOf is a command of asked limits (the request as it came),
// granted spec (validated, caps applied) and report (nil: it did not
// run).
func AuditCommandOf(asked map[string]any, granted *api.Spec, rep *api.Report) AuditCommand {
	c := AuditCommand{Asked: asked, BoxID: -1}
	if granted != nil {
		c.Image = granted.Image
		if c.Image == "" && granted.Lang != "" {
			c.Image = granted.Lang
		}
		d := granted.WithDefaults()
		c.Granted = api.Limits(&d)
	}
	if rep != nil {
		c.Status, c.CPUTime, c.MemoryPeak, c.WallTime, c.BoxID = string(rep.Status), rep.CPUTime, rep.MemoryPeak, rep.WallTime, rep.BoxID
		c.Network = rep.Network
		if rep.Sandbox.Image != "" {
			c.Image = rep.Sandbox.Image
		}
	}
	return c
}

// Verdict is the verdict of commands: the first status that is not OK.
func Verdict(commands []AuditCommand) string {
	v := ""
	for _, c := range commands {
		if c.Status == "" {
			continue
		}
		if v == "" || v == string(api.StatusOK) {
			v = c.Status
		}
	}
	return v
}

// auditNote is what a request's handler tells its audit line, kept in the
// request's context.
type auditNote struct {
	id       string
	mu       sync.Mutex
	session  string
	asked    []map[string]any // per command, as the request asked
	commands []AuditCommand
	verdict  string // set by the handler when it knows better than the status
}

type auditKey struct{}

// noteOf is the request's audit note (a throwaway one for a context
// without: nothing is lost, nothing written).
func noteOf(ctx context.Context) *auditNote {
	if n, ok := ctx.Value(auditKey{}).(*auditNote); ok {
		return n
	}
	return &auditNote{}
}

// requestID is the id of the request ctx belongs to ("" for none).
func requestID(ctx context.Context) string { return noteOf(ctx).id }

// ask records the limits each command asked, before validation applies
// caps and defaults.
func (n *auditNote) ask(specs ...*api.Spec) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.asked = n.asked[:0]
	for _, s := range specs {
		n.asked = append(n.asked, api.Limits(s))
	}
}

// setSession names the session the request made.
func (n *auditNote) setSession(id string) {
	n.mu.Lock()
	n.session = id
	n.mu.Unlock()
}

// settle records command i's granted spec and report.
func (n *auditNote) settle(i int, granted *api.Spec, rep *api.Report) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var asked map[string]any
	if i < len(n.asked) {
		asked = n.asked[i]
	}
	c := AuditCommandOf(asked, granted, rep)
	for len(n.commands) <= i {
		n.commands = append(n.commands, AuditCommand{BoxID: -1})
	}
	n.commands[i] = c
}

// settleExec records an exec's phases: one command each that ran.
func (n *auditNote) settleExec(granted *api.Spec, rep *api.ExecReport) {
	i := 0
	for _, phase := range []*api.Report{rep.Compile, rep.Run} {
		if phase != nil {
			n.settle(i, granted, phase)
			i++
		}
	}
	n.mu.Lock()
	if rep.Status != "" {
		n.verdict = string(rep.Status)
	}
	n.mu.Unlock()
}

// settleSession records a session's command that ran in the foreground.
func (n *auditNote) settleSession(id uint64, rep *api.Report) {
	n.settle(0, nil, rep)
	n.mu.Lock()
	n.commands[0].Process = id
	n.mu.Unlock()
}

// started records a session's command started in the background: its
// own line comes when it ends.
func (n *auditNote) started(id uint64) {
	n.mu.Lock()
	n.commands = []AuditCommand{{BoxID: -1, Process: id}}
	n.verdict = "started"
	n.mu.Unlock()
}

// auditRecorder keeps the status of an answer and the start of an
// error's body (its message).
type auditRecorder struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (r *auditRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *auditRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	if r.code >= 400 && r.body.Len() < 1024 {
		r.body.Write(b[:min(len(b), 1024-r.body.Len())])
	}
	return r.ResponseWriter.Write(b)
}

func (r *auditRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *auditRecorder) FlushError() error {
	return http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *auditRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// unaudited are the endpoints that leave no line: they read the service's
// state, run nothing and hold nothing (a monitor polls them).
var unaudited = map[string]bool{"GET /v1/health": true, "GET /v1/version": true, "GET /metrics": true}

// audited gives each request of pattern an id (its answer's X-Request-Id)
// and an audit note, and writes its line once the handler is done.
func (s *Server) audited(pattern string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id, _ := r.Context().Value(requestIDKey{}).(string)
		if id == "" {
			id = NewRequestID()
		}
		n := &auditNote{id: id}
		w.Header().Set(RequestIDHeader, n.id)
		if unaudited[pattern] {
			next(w, r)
			return
		}
		rec := &auditRecorder{ResponseWriter: w}
		next(rec, r.WithContext(context.WithValue(r.Context(), auditKey{}, n)))
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		who := callerOf(r)
		front := frontEnd(who, pattern)
		if r.Context().Value(mcpKey{}) != nil {
			front = FrontMCP
		}
		l := &AuditLine{Time: start, RequestID: n.id, FrontEnd: front, Endpoint: pattern,
			Caller: AuditCallerOf(who), Code: rec.code, Duration: time.Since(start).Seconds()}
		if who.Via == caller.TCP {
			l.Caller.Addr = r.RemoteAddr
		}
		if rec.code >= 400 {
			var e errorBody
			json.Unmarshal(rec.body.Bytes(), &e)
			l.Error = e.Error
		}
		n.mu.Lock()
		l.Session, l.Commands, l.Verdict = n.session, n.commands, n.verdict
		if l.Session == "" && strings.Contains(pattern, "/v1/sessions/{id}") {
			l.Session = r.PathValue("id")
		}
		n.mu.Unlock()
		if l.Verdict == "" {
			l.Verdict = Verdict(l.Commands)
		}
		if l.Verdict == "" || rec.code >= 400 {
			l.Verdict = verdictOfStatus(rec.code)
		}
		s.audit.Write(l)
	}
}

type requestIDKey struct{}

// auditRefused gives a request its id before the token is checked, and
// writes the line of one refused for its token (401), which reaches no
// endpoint.
func (s *Server) auditRefused(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start, id := time.Now(), NewRequestID()
		w.Header().Set(RequestIDHeader, id)
		rec := &auditRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
		if rec.code != http.StatusUnauthorized {
			return
		}
		who := callerOf(r)
		l := &AuditLine{Time: start, RequestID: id, FrontEnd: FrontAPI, Endpoint: r.Method + " " + r.URL.Path, Caller: AuditCallerOf(who),
			Code: rec.code, Verdict: "unauthorized", Error: "no valid bearer token", Duration: time.Since(start).Seconds()}
		if who.Via == caller.TCP {
			l.Caller.Addr = r.RemoteAddr
		}
		s.audit.Write(l)
	})
}

// frontEnd names the front end of a request to pattern by who.
func frontEnd(who caller.Caller, pattern string) string {
	switch {
	case who.Via == caller.Queue:
		return FrontQueue
	case strings.Contains(pattern, "/v1/sessions"):
		return FrontSession
	}
	return FrontAPI
}

// verdictOfStatus is the verdict of a request by its answer's status.
func verdictOfStatus(code int) string {
	switch {
	case code < 400:
		return "ok"
	case code == http.StatusForbidden:
		return "refused"
	case code == http.StatusNotFound:
		return "not_found"
	case code == http.StatusTooManyRequests:
		return "busy"
	case code == http.StatusServiceUnavailable:
		return "stopping"
	case code < 500:
		return "bad_request"
	}
	return "error " + strconv.Itoa(code)
}

// auditBackground writes the line of a session's background command once
// it ended: the request that started it settled then, its command now.
func (s *Server) auditBackground(who caller.Caller, sessionID, requestID string, start time.Time, id uint64, rep *api.Report) {
	c := AuditCommandOf(nil, nil, rep)
	c.Process = id
	s.audit.Write(&AuditLine{Time: time.Now(), RequestID: requestID, FrontEnd: FrontSession,
		Endpoint: "background command", Caller: AuditCallerOf(who), Session: sessionID,
		Verdict: c.Status, Duration: time.Since(start).Seconds(), Commands: []AuditCommand{c}})
}

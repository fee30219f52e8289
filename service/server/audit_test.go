package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate/egress"
	"github.com/isolate-sandbox/isolate/service/caller"
	"github.com/isolate-sandbox/isolate/service/filestore"
)

// auditBuffer collects audit lines, safe for the writers of background
// commands' lines.
type auditBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *auditBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines are the lines written so far, decoded (each must be one JSON
// object on one line).
func (b *auditBuffer) lines(t *testing.T) []AuditLine {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []AuditLine
	for _, raw := range strings.Split(strings.TrimSuffix(b.buf.String(), "\n"), "\n") {
		if raw == "" {
			continue
		}
		var l AuditLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("an audit line that is not JSON: %q: %v", raw, err)
		}
		out = append(out, l)
	}
	return out
}

// find is the line of request id, or nil.
func (b *auditBuffer) find(t *testing.T, id string) *AuditLine {
	for _, l := range b.lines(t) {
		if l.RequestID == id {
			return &l
		}
	}
	return nil
}

// auditFake is a service over scriptRunner and the fake session host,
// capped (--max-mem 256M), whose audit lines go to a buffer.
func auditFake(t *testing.T) (*sessionFake, *auditBuffer) {
	buf := &auditBuffer{}
	f := newSessionFake(t, func(c *Config) {
		c.Runner = scriptRunner{}
		c.Audit = NewAuditor(buf)
		c.Policy.Caps.MemoryBytes = 256 << 20
	})
	return f, buf
}

// doH is do with the answer's headers.
func (f *sessionFake) doH(t *testing.T, who caller.Caller, method, path, body string) (int, []byte, http.Header) {
	t.Helper()
	r := httptest.NewRequest(method, "http://isolate"+path, strings.NewReader(body))
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, who))
	w := httptest.NewRecorder()
	f.Handler().ServeHTTP(w, r)
	return w.Code, w.Body.Bytes(), w.Result().Header
}

// A run leaves one line: who, the front end and endpoint, the limits
// asked and granted, the verdict and usage, and the request id its
// answer carries in X-Request-Id and in each report.
func TestAuditLineOfARunFake(t *testing.T) {
	f, buf := auditFake(t)
	code, b, h := f.doH(t, alice, "POST", "/v1/run", `{"commands":[{"args":["echo","hi"],"cpu_time_ms":1000},{"args":["exit"]}]}`)
	id := h.Get(RequestIDHeader)
	if code != 200 || len(id) != 24 {
		t.Fatalf("run: %d %s, request id %q", code, b, id)
	}
	rr := decodeAs[RunResponse](t, b)
	for i, r := range rr.Results {
		if r.RequestID != id {
			t.Errorf("result %d: request_id %q, want %q", i, r.RequestID, id)
		}
	}
	l := buf.find(t, id)
	if l == nil {
		t.Fatalf("no audit line of %s in %v", id, buf.lines(t))
	}
	if l.FrontEnd != FrontAPI || l.Endpoint != "POST /v1/run" || l.Code != 200 || l.Verdict != "RE" || l.Time.IsZero() {
		t.Errorf("line: %+v", l)
	}
	if l.Caller != (AuditCaller{Via: "api", UID: 1001, GID: 1001, Owner: "uid:1001"}) {
		t.Errorf("caller: %+v", l.Caller)
	}
	if len(l.Commands) != 2 {
		t.Fatalf("commands: %+v", l.Commands)
	}
	c := l.Commands[0]
	if c.Asked["cpu_time_ms"] != float64(1000) || c.Asked["memory_bytes"] != nil {
		t.Errorf("asked: %v", c.Asked)
	}
	if c.Granted["cpu_time_ms"] != float64(1000) || c.Granted["memory_bytes"] != float64(256<<20) || c.Granted["pids"] != float64(64) {
		t.Errorf("granted (the cap as the default, the contract's defaults): %v", c.Granted)
	}
	if c.Status != "OK" || l.Commands[1].Status != "RE" {
		t.Errorf("statuses: %+v", l.Commands)
	}
}

// A refused request leaves its line too, with its status and error, and
// its answer names the request.
func TestAuditLineOfARefusalFake(t *testing.T) {
	f, buf := auditFake(t)
	code, b, h := f.doH(t, alice, "POST", "/v1/run", `{"commands":[{"args":["echo"],"net":"host"}]}`)
	id := h.Get(RequestIDHeader)
	if code != 403 || id == "" {
		t.Fatalf("net host as a member: %d %s, request id %q", code, b, id)
	}
	l := buf.find(t, id)
	if l == nil || l.Verdict != "refused" || l.Code != 403 || !strings.Contains(l.Error, "net") || len(l.Commands) != 0 {
		t.Errorf("line of a refusal: %+v", l)
	}
	// Health and metrics leave none, but name their request.
	before := len(buf.lines(t))
	if _, _, h := f.doH(t, alice, "GET", "/v1/health", ""); h.Get(RequestIDHeader) == "" {
		t.Errorf("health: no %s", RequestIDHeader)
	}
	if n := len(buf.lines(t)); n != before {
		t.Errorf("health wrote an audit line")
	}
}

// Each session command leaves a line; one in the background, a line when
// it starts and one when it ends; the session's own requests name it.
func TestAuditLinesOfSessionCommandsFake(t *testing.T) {
	f, buf := auditFake(t)
	code, b, h := f.doH(t, alice, "POST", "/v1/sessions", `{"memory_bytes": 1048576}`)
	sid := decodeAs[SessionAnswer](t, b).ID
	if l := buf.find(t, h.Get(RequestIDHeader)); code != 201 || l == nil || l.FrontEnd != FrontSession || l.Session != sid ||
		len(l.Commands) != 1 || l.Commands[0].Granted["memory_bytes"] != float64(1<<20) || l.Commands[0].Asked["memory_bytes"] != float64(1<<20) ||
		l.Commands[0].Granted["pids"] != float64(64) || l.Commands[0].Asked["pids"] != nil {
		t.Fatalf("session created: %d %s, line %+v", code, b, l)
	}
	code, b, h = f.doH(t, alice, "POST", "/v1/sessions/"+sid+"/commands", `{"args":["echo","fg"]}`)
	l := buf.find(t, h.Get(RequestIDHeader))
	if rep := decodeAs[waitAnswer](t, b); code != 200 || rep.RequestID != h.Get(RequestIDHeader) {
		t.Errorf("foreground command: %d %s", code, b)
	}
	if l == nil || l.FrontEnd != FrontSession || l.Session != sid || l.Verdict != "OK" || len(l.Commands) != 1 || l.Commands[0].Process == 0 {
		t.Errorf("foreground command's line: %+v", l)
	}
	code, b, h = f.doH(t, alice, "POST", "/v1/sessions/"+sid+"/commands", `{"args":["echo","bg"],"background":true}`)
	bgID := h.Get(RequestIDHeader)
	if l := buf.find(t, bgID); code != 201 || l == nil || l.Verdict != "started" {
		t.Errorf("background command: %d %s, line %+v", code, b, l)
	}
	var ended *AuditLine
	for deadline := time.Now().Add(10 * time.Second); ended == nil && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, l := range buf.lines(t) {
			if l.RequestID == bgID && l.Endpoint == "background command" {
				ended = &l
			}
		}
	}
	if ended == nil || ended.Verdict != "OK" || ended.Session != sid || ended.Caller.UID != 1001 || len(ended.Commands) != 1 {
		t.Errorf("background command's end: %+v", ended)
	}
}

// Root lists every caller's sessions with their owners (all=1) and looks
// at any; another caller asking all=1 is refused, and sees its own only.
func TestSessionsAllFake(t *testing.T) {
	f, _ := auditFake(t)
	a, bb := f.create(t, alice, `{}`), f.create(t, bob, `{}`)
	code, b := f.do(t, root, "GET", "/v1/sessions?all=1", "")
	list := decodeAs[map[string][]SessionAnswer](t, b)["sessions"]
	owners := map[string]string{}
	for _, s := range list {
		owners[s.ID] = s.Owner
	}
	if code != 200 || owners[a] != "uid:1001" || owners[bb] != "uid:1002" {
		t.Errorf("root's all=1: %d %s", code, b)
	}
	if code, b := f.do(t, root, "GET", "/v1/sessions/"+a+"?all=1", ""); code != 200 || decodeAs[SessionAnswer](t, b).Owner != "uid:1001" {
		t.Errorf("root looking at alice's session: %d %s", code, b)
	}
	if code, b := f.do(t, root, "GET", "/v1/sessions", ""); code != 200 || strings.Contains(string(b), a) {
		t.Errorf("root's own list shows alice's: %d %s", code, b)
	}
	for _, path := range []string{"/v1/sessions?all=1", "/v1/sessions/" + a + "?all=1"} {
		for _, who := range []caller.Caller{bob, tcp} {
			code, b := f.do(t, who, "GET", path, "")
			if code != 403 || !strings.Contains(string(b), `"field":"all"`) {
				t.Errorf("GET %s as %v: %d %s, want 403 naming all", path, who, code, b)
			}
		}
	}
}

// The monitor answers /metrics (with the per-caller usage) and
// /v1/health without a token, and nothing that runs code.
func TestMonitorFake(t *testing.T) {
	dir := t.TempDir()
	store, err := filestore.Open(filepath.Join(dir, "files"), 1<<20, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := New(Config{Runner: scriptRunner{}, Store: store, Parallel: 2, Token: "the-run-token-0123456789"})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeMonitor(l) }()
	defer func() { srv.Shutdown(time.Second); <-done }()
	srv.Answer(t.Context(), alice, "POST", "/v1/run", `{"commands":[{"args":["echo"]}]}`)
	get := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+l.Addr().String()+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := get("GET", "/metrics", ""); code != 200 || !strings.Contains(b, `isolate_caller_commands{caller="uid:1001"} 1`) {
		t.Errorf("monitor /metrics: %d, no per-caller usage:\n%.2000s", code, b)
	}
	if code, b := get("GET", "/v1/health", ""); (code != 200 && code != 503) || !strings.Contains(b, `"ready"`) {
		t.Errorf("monitor /v1/health: %d %s", code, b)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/run", `{"commands":[{"args":["echo","ran"]}]}`},
		{"POST", "/v1/sessions", `{}`},
		{"GET", "/v1/files/x", ""},
		{"GET", "/v1/version", ""},
	} {
		if code, b := get(c.method, c.path, c.body); code != 404 || strings.Contains(b, "ran") {
			t.Errorf("monitor %s %s: %d %s, want 404", c.method, c.path, code, b)
		}
	}
}

// Per-caller usage keeps the 10 callers that used the most CPU apart and
// the rest together, however many callers there are.
func TestCallerUsageTop(t *testing.T) {
	a := NewAuditor()
	for i := 0; i < maxCallers+50; i++ {
		a.Write(&AuditLine{Caller: AuditCaller{Owner: fmt.Sprintf("uid:%d", i)}, Commands: []AuditCommand{{Status: "OK", CPUTime: float64(i)}}})
	}
	owners, uses := a.usage.top()
	if len(owners) != topCallers+1 || owners[topCallers] != otherOwner {
		t.Fatalf("owners: %v", owners)
	}
	if owners[0] != fmt.Sprintf("uid:%d", maxCallers-1) || uses[0].cpu != float64(maxCallers-1) {
		t.Errorf("the top caller: %s %+v", owners[0], uses[0])
	}
	total := 0.0
	for _, u := range uses {
		total += u.commands
	}
	if total != maxCallers+50 || len(a.usage.byOwner) != maxCallers {
		t.Errorf("commands counted %v of %d; %d owners held", total, maxCallers+50, len(a.usage.byOwner))
	}
}

// A request without the token reaches no endpoint, and still leaves its
// line and names its request.
func TestAuditLineOfAnUnauthorizedFake(t *testing.T) {
	buf := &auditBuffer{}
	srv := New(Config{Runner: scriptRunner{}, Parallel: 1, Token: "the-run-token-0123456789", Audit: NewAuditor(buf)})
	w := httptest.NewRecorder()
	srv.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/run", strings.NewReader(`{"commands":[{"args":["echo"]}]}`)))
	id := w.Result().Header.Get(RequestIDHeader)
	l := buf.find(t, id)
	if w.Code != 401 || id == "" || l == nil || l.Verdict != "unauthorized" || l.Code != 401 || l.Endpoint != "POST /v1/run" {
		t.Errorf("without the token: %d, id %q, line %+v", w.Code, id, l)
	}
	w = httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/v1/run", strings.NewReader(`{"commands":[{"args":["echo"]}]}`))
	r.Header.Set("Authorization", "Bearer the-run-token-0123456789")
	srv.Handler().ServeHTTP(w, r)
	if id := w.Result().Header.Get(RequestIDHeader); w.Code != 200 || buf.find(t, id) == nil || len(buf.lines(t)) != 2 {
		t.Errorf("with the token: %d, id %q, lines %+v", w.Code, id, buf.lines(t))
	}
}

// A box's connections through its allowlist are in its command's line.
func TestAuditCommandHasTheNetwork(t *testing.T) {
	nr := &egress.Report{Allowed: 1, Refused: 1, Connections: []egress.Connection{
		{Host: "pypi.org", Port: 443, Via: "connect", Allowed: true, BytesOut: 10, BytesIn: 20},
		{Host: "evil.example", Port: 80, Via: "http", Reason: "evil.example:80 is not in the allowlist"}}}
	c := AuditCommandOf(nil, &api.Spec{Args: []string{"x"}}, &api.Report{Status: api.StatusOK, Network: nr})
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"network":{"connections":[{"host":"pypi.org"`) || !strings.Contains(string(b), `"refused":1`) {
		t.Errorf("line: %s", b)
	}
	if b, _ := json.Marshal(AuditCommandOf(nil, nil, &api.Report{Status: api.StatusOK})); strings.Contains(string(b), "network") {
		t.Errorf("a run without an allowlist: %s", b)
	}
}

// A tool call over MCP is a request of the API as the MCP connection's
// caller, audited as the MCP front end's.
func TestAuditLineOfAnMCPCallFake(t *testing.T) {
	f, buf := auditFake(t)
	r := httptest.NewRequest("POST", "/v1/run", strings.NewReader(`{"commands":[{"args":["echo","hi"]}]}`))
	w := httptest.NewRecorder()
	f.HandlerAs(alice).ServeHTTP(w, r)
	id := w.Result().Header.Get(RequestIDHeader)
	l := buf.find(t, id)
	if w.Code != 200 || l == nil {
		t.Fatalf("run: %d %s, no line %s in %v", w.Code, w.Body.Bytes(), id, buf.lines(t))
	}
	if l.FrontEnd != FrontMCP || l.Caller.UID != 1001 || l.Endpoint != "POST /v1/run" {
		t.Errorf("line: %+v", l)
	}
}

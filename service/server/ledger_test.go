package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/internal/connlimit"
	"github.com/isolate-sandbox/isolate/internal/fdtest"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// A session's background commands hold their captured output in the
// ledger of their caller's account: at its limit while they run, as kept
// once they ended, until their records go (the oldest ended ones make
// room for new ones); beyond the budget a command gets 429 and nothing
// runs, 400 if it alone is beyond it. Each takes a run slot while it runs. Ending the session gives
// everything back.
func TestSessionBackgroundBudgetFake(t *testing.T) {
	ledger := caller.NewLedger(caller.Budget{Bytes: 10 << 10, TotalBytes: 13 << 10, Background: 2})
	f := newSessionFake(t, func(c *Config) { c.Ledger = ledger; c.Parallel = 3 })
	id := f.create(t, alice, `{"output_limit_bytes": 2048}`)
	cmds := "/v1/sessions/" + id + "/commands"
	start := func(who caller.Caller, args string) (int, string) {
		code, b := f.do(t, who, "POST", cmds, `{"args": [`+args+`], "background": true}`)
		return code, string(b)
	}
	for i := range 2 {
		if code, b := start(alice, `"sleep"`); code != 201 {
			t.Fatalf("background sleep %d: %d %s", i, code, b)
		}
	}
	if u := ledger.Usage(alice.Account()); u.Bytes != 4*(2048+isolate.MaxCutMarkerBytes) || u.Background != 2 {
		t.Fatalf("two running commands of 2 KiB a stream hold %+v, want 4 streams' limit and cut marker, 2 background", u)
	}
	if running, _ := f.queue.lengths(); running != 2 {
		t.Errorf("%d run slots taken, want 2 (one a background command)", running)
	}
	if code, b := start(alice, `"sleep"`); code != 429 || !strings.Contains(b, "--max-held-bytes-per-caller") {
		t.Fatalf("a third beyond the bytes: %d %s", code, b)
	}
	if f.host.box(0).running() != 2 {
		t.Fatalf("a refused command ran")
	}
	// Another caller's budget is its own; the total binds them all.
	bid := f.create(t, bob, `{"output_limit_bytes": 2048}`)
	if code, b := f.do(t, bob, "POST", "/v1/sessions/"+bid+"/commands", `{"args": ["sleep"], "background": true}`); code != 201 {
		t.Fatalf("bob's: %d %s", code, b)
	}
	if code, b := f.do(t, bob, "POST", "/v1/sessions/"+bid+"/commands", `{"args": ["sleep"], "stderr_to_stdout": true, "background": true}`); code != 429 || !strings.Contains(string(b), "--max-held-bytes)") {
		t.Fatalf("bob's second beyond the total: %d %s", code, b)
	}
	// Ended, a command keeps what it kept.
	f.do(t, alice, "POST", cmds+"/1/signal", `{"signal": "KILL"}`)
	f.do(t, alice, "POST", cmds+"/1/wait", ``)
	if u := ledger.Usage(alice.Account()); u.Bytes != 2*(2048+isolate.MaxCutMarkerBytes) || u.Background != 1 {
		t.Fatalf("after one ended with nothing kept: %+v", u)
	}
	// Many commands that keep output, one after the other: the oldest
	// ended records make room, the held bytes stay within the budget.
	for i := range 8 {
		code, b := start(alice, `"zeros", "100000"`)
		if code != 201 {
			t.Fatalf("zeros %d: %d %s", i, code, b)
		}
		var a struct{ ID int }
		decodeJSON(b, &a)
		f.do(t, alice, "POST", fmt.Sprintf("%s/%d/wait", cmds, a.ID), ``)
		if u := ledger.Usage(alice.Account()); u.Bytes > 10<<10 {
			t.Fatalf("after zeros %d: %+v held, beyond the budget", i, u)
		}
	}
	if code, b := f.do(t, alice, "GET", cmds+"/10", ""); code != 200 || !strings.Contains(string(b), `"running":false`) {
		t.Errorf("the last command's record: %d %s", code, b)
	}
	// One that alone is beyond the budget never fits: 400, and no ended
	// record goes for it; nor for one beyond the background commands
	// (bob's command ended: the total leaves room).
	f.do(t, bob, "POST", "/v1/sessions/"+bid+"/commands/1/signal", `{"signal": "KILL"}`)
	f.do(t, bob, "POST", "/v1/sessions/"+bid+"/commands/1/wait", ``)
	if code, b := f.do(t, alice, "POST", cmds, `{"args": ["sleep"], "output_limit_bytes": 8192, "background": true}`); code != 400 || !strings.Contains(string(b), "output_limit_bytes") || !strings.Contains(string(b), "--max-held-bytes-per-caller") {
		t.Fatalf("a command holding 16 KiB of a budget of 10: %d %s, want 400", code, b)
	}
	if code, b := f.do(t, alice, "POST", cmds, `{"args": ["sleep"], "output_limit_bytes": 512, "stderr_to_stdout": true, "background": true}`); code != 201 {
		t.Fatalf("a second running command: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "POST", cmds, `{"args": ["sleep"], "output_limit_bytes": 512, "stderr_to_stdout": true, "background": true}`); code != 429 || !strings.Contains(string(b), "--max-background-per-caller") {
		t.Fatalf("a third running command: %d %s, want 429", code, b)
	}
	if code, b := f.do(t, alice, "GET", cmds+"/10", ""); code != 200 {
		t.Errorf("the last ended command's record after refusals that dropping records cannot help: %d %s", code, b)
	}
	f.do(t, alice, "DELETE", "/v1/sessions/"+id, "")
	f.do(t, bob, "DELETE", "/v1/sessions/"+bid, "")
	if total, refused := ledger.Total(); total != (caller.Usage{}) || refused < 2 {
		t.Errorf("with every session ended the ledger holds %+v (refused %d)", total, refused)
	}
}

// A subordinate uid counts as the user who owns its range: its sessions
// are that user's in the per-caller cap, though it cannot reach them.
func TestSubordinateUIDsShareTheirOwnersBudgetFake(t *testing.T) {
	file := filepath.Join(t.TempDir(), "subuid")
	os.WriteFile(file, []byte("1001:200000:65536\n"), 0o644)
	caller.SetSubUIDFile(file)
	t.Cleanup(func() { caller.SetSubUIDFile("/etc/subuid") })
	sub := caller.Caller{Via: caller.API, UID: 200007, GID: 1001}
	if sub.Account() != alice.Account() || bob.Account() == alice.Account() {
		t.Fatalf("accounts: sub %s, alice %s, bob %s", sub.Account(), alice.Account(), bob.Account())
	}
	f := newSessionFake(t, nil) // 2 sessions per caller
	id := f.create(t, alice, `{}`)
	f.create(t, sub, `{}`)
	if code, b := f.do(t, sub, "POST", "/v1/sessions", `{}`); code != 429 || !strings.Contains(string(b), "--max-sessions-per-caller") {
		t.Fatalf("a third session of alice's account: %d %s", code, b)
	}
	if code, _ := f.do(t, sub, "GET", "/v1/sessions/"+id, ""); code != 404 {
		t.Errorf("a subordinate uid reached its owner's session: %d", code)
	}
}

func decodeJSON(b string, v any) { json.Unmarshal([]byte(b), v) }

// A client that trickles a streamed body (a session's file, a background
// command's stdin, a stored file) is cut off, as one that sends a run's
// body too slowly is: it holds no connection and no request for ever.
func TestStreamedBodiesHaveADeadline(t *testing.T) {
	defer func(d time.Duration) { readTimeout = d }(readTimeout)
	readTimeout = time.Second
	s := startService(t, func(c *Config) { c.Sessions = &fakeHost{t: t} })
	var sess struct{ ID string }
	if code, b := s.do(t, "POST", "/v1/sessions", `{}`); code != 201 || json.Unmarshal(b, &sess) != nil {
		t.Fatalf("session: %d %s", code, b)
	}
	var p struct{ ID int }
	if code, b := s.do(t, "POST", "/v1/sessions/"+sess.ID+"/commands", `{"args": ["sleep"], "background": true}`); code != 201 || json.Unmarshal(b, &p) != nil {
		t.Fatalf("background sleep: %d %s", code, b)
	}
	for _, c := range []struct{ method, path string }{
		{"PUT", "/v1/sessions/" + sess.ID + "/files/slow"},
		{"POST", fmt.Sprintf("/v1/sessions/%s/commands/%d/stdin", sess.ID, p.ID)},
		{"POST", "/v1/files"},
	} {
		conn, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		// A body of a megabyte announced, one byte sent.
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: isolate\r\nContent-Length: 1048576\r\n\r\nx", c.method, c.path)
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		_, err = io.ReadAll(conn)
		conn.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s %s: the service still waits for the body after a minute", c.method, c.path)
		}
	}
}

// Connections that each made a request and wait, kept alive, for the
// next make room for a new one of their uid's: they are closed first,
// and never lock their uid out.
func TestKeepAliveConnectionsNeverLockOutTheirUID(t *testing.T) {
	s := startService(t, func(c *Config) { c.Conns = connlimit.Limits{PerPeer: 8} })
	var kept []net.Conn
	defer func() {
		for _, c := range kept {
			c.Close()
		}
	}()
	for range 8 {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, c)
		fmt.Fprint(c, "GET /v1/version HTTP/1.1\r\nHost: isolate\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := range 3 {
		if code, b := s.do(t, "GET", "/v1/version", ""); code != http.StatusOK {
			t.Fatalf("request %d beside 8 idle connections of its uid: %d %s", i, code, b)
		}
	}
	if _, refused, _ := s.Connections(); refused != 0 {
		t.Errorf("%d connections refused, want none: idle ones make room", refused)
	}
}

// A caller past its quota of runs in the window gets 429 with
// Retry-After, whichever front end it uses; another caller does not.
func TestQuotaFake(t *testing.T) {
	ledger := caller.NewLedger(caller.Budget{Quotas: caller.Quotas{Window: time.Hour, Default: caller.Quota{Runs: 2}}})
	f := newSessionFake(t, func(c *Config) { c.Ledger = ledger })
	id := f.create(t, alice, `{}`)
	cmds := "/v1/sessions/" + id + "/commands"
	for i := range 2 {
		if code, b := f.do(t, alice, "POST", cmds, `{"args": ["echo", "hi"]}`); code != 200 {
			t.Fatalf("run %d: %d %s", i, code, b)
		}
	}
	r := httptest.NewRequest("POST", "http://isolate"+cmds, strings.NewReader(`{"args": ["echo", "hi"], "background": true}`))
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, alice))
	w := httptest.NewRecorder()
	f.Handler().ServeHTTP(w, r)
	if w.Code != 429 || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "--quota") {
		t.Fatalf("the third run in the window: %d %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if code, b := f.do(t, alice, "POST", "/v1/run", `{"commands": [{"args": ["/bin/true"]}]}`); code != 429 {
		t.Errorf("a run of the API past the quota: %d %s", code, b)
	}
	bid := f.create(t, bob, `{}`)
	if code, b := f.do(t, bob, "POST", "/v1/sessions/"+bid+"/commands", `{"args": ["echo", "hi"]}`); code != 200 {
		t.Errorf("another caller's run: %d %s", code, b)
	}
}

// A command refused its output's hold (429 or 400) counts no run of its
// caller's quota: a client retrying a busy answer does not use it up.
func TestHeldRefusalsUseNoQuotaFake(t *testing.T) {
	ledger := caller.NewLedger(caller.Budget{Bytes: 5 << 20, TotalBytes: 8 << 20, Quotas: caller.Quotas{Window: time.Hour, Default: caller.Quota{Runs: 2}}})
	f := newSessionFake(t, func(c *Config) { c.Ledger = ledger })
	id := f.create(t, alice, `{"output_limit_bytes": 2097152}`)
	cmds := "/v1/sessions/" + id + "/commands"
	if code, b := f.do(t, alice, "POST", cmds, `{"args": ["sleep"], "background": true}`); code != 201 {
		t.Fatalf("a background command: %d %s", code, b)
	}
	for i := range 3 {
		if code, b := f.do(t, alice, "POST", cmds, `{"args": ["echo", "hi"]}`); code != 429 {
			t.Fatalf("foreground command %d beside the background one: %d %s, want 429", i, code, b)
		}
		if code, b := f.do(t, alice, "POST", cmds, `{"args": ["sleep"], "background": true}`); code != 429 {
			t.Fatalf("background command %d beside the first: %d %s, want 429", i, code, b)
		}
	}
	if runs, _ := ledger.Used(alice.Account()); runs != 1 {
		t.Fatalf("after refused holds alice used %d runs, want 1", runs)
	}
	f.do(t, alice, "POST", cmds+"/1/signal", `{"signal": "KILL"}`)
	f.do(t, alice, "POST", cmds+"/1/wait", ``)
	if code, b := f.do(t, alice, "POST", cmds, `{"args": ["echo", "hi"]}`); code != 200 {
		t.Fatalf("the second run of the quota: %d %s", code, b)
	}
}

// One caller's stalled bodies hold at most half the service's places:
// another caller is still let in.
func TestStalledBodiesLeaveOthersTheirPlacesFake(t *testing.T) {
	f := newSessionFake(t, nil) // --parallel 2, --queue 4: 6 places, 3 a caller
	var writers []*io.PipeWriter
	refused := make(chan int, 6)
	for range 6 {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		r := httptest.NewRequest("POST", "http://isolate/v1/sessions", pr)
		r = r.WithContext(context.WithValue(r.Context(), callerKey{}, alice))
		go func() {
			w := httptest.NewRecorder()
			f.Handler().ServeHTTP(w, r)
			refused <- w.Code
		}()
	}
	defer func() {
		for _, pw := range writers {
			pw.CloseWithError(errors.New("gone"))
		}
	}()
	for range 3 {
		if code := <-refused; code != 429 {
			t.Fatalf("a stalled request beyond alice's share: %d, want 429", code)
		}
	}
	if code, b := f.do(t, bob, "POST", "/v1/sessions", `{}`); code != 201 {
		t.Errorf("bob beside alice's stalled bodies: %d %s", code, b)
	}
}

// A freed slot goes to the waiting account that runs the fewest
// commands: one caller's queued requests do not keep another's behind
// them all.
func TestQueueServesAccountsInTurn(t *testing.T) {
	q := newQueue(1, 8)
	ctx := context.Background()
	if err := q.acquireFor(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	admitted := make(chan string, 4)
	queued := 0
	wait := func(account string) {
		go func() {
			if q.acquireFor(ctx, account, 1) == nil {
				admitted <- account
			}
		}()
		queued++
		for {
			q.mu.Lock()
			n := len(q.waiting)
			q.mu.Unlock()
			if n == queued {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait("a")
	wait("a")
	wait("a")
	wait("b")
	q.releaseFor("a", 1)
	if got := <-admitted; got != "b" {
		t.Fatalf("after a's command, %s is let in, want b (a runs one, b none)", got)
	}
	q.releaseFor("b", 1)
	for range 3 {
		if got := <-admitted; got != "a" {
			t.Fatalf("%s let in, want a", got)
		}
		q.releaseFor("a", 1)
	}
	if r, w := q.lengths(); r != 0 || w != 0 {
		t.Errorf("%d running, %d waiting at the end", r, w)
	}
}

// A capped caller's session commands, in the background too, run within
// --max-wall-time (the default of a background one) and --max-time (each
// process's CPU time); a timeout beyond the cap is a 400.
func TestSessionCommandsWithinTheCapsFake(t *testing.T) {
	f := newSessionFake(t, func(c *Config) { c.Policy.Caps.CPUTimeMs, c.Policy.Caps.WallTimeMs = 1000, 5000 })
	id := f.create(t, alice, `{}`)
	cmds := "/v1/sessions/" + id + "/commands"
	if code, b := f.do(t, alice, "POST", cmds, `{"args": ["sleep"], "background": true, "timeout_ms": 600000}`); code != 400 || !strings.Contains(string(b), `"timeout_ms"`) {
		t.Fatalf("a background command of 10 minutes under --max-wall-time 5s: %d %s", code, b)
	}
	if code, b := f.do(t, alice, "POST", cmds, `{"args": ["sleep"], "background": true}`); code != 201 {
		t.Fatalf("a background command: %d %s", code, b)
	}
	box := f.host.box(0)
	box.mu.Lock()
	cmd := box.cmds[len(box.cmds)-1]
	box.mu.Unlock()
	if cmd.WallTime != 5*time.Second || cmd.CPUTime != time.Second {
		t.Errorf("the background command's wall time %v, CPU time %v: want the caps, 5s and 1s", cmd.WallTime, cmd.CPUTime)
	}
}

// usageRunner is scriptRunner that notes what its caller's account holds
// in the ledger while a command runs.
type usageRunner struct {
	scriptRunner
	ledger  *caller.Ledger
	account string
	seen    *caller.Usage
}

func (r usageRunner) Run(ctx context.Context, spec *api.Spec, stdio isolate.IO) (*api.Report, error) {
	*r.seen = r.ledger.Usage(r.account)
	return r.scriptRunner.Run(ctx, spec, stdio)
}

// A foreground request's captured output is held in its caller's budget:
// at its limits while it runs (a request beyond the caller's budget, or
// the service's, gets 429 and runs nothing), as kept once it ended, and
// given back once the answer is written. A session's foreground command
// is held as a run is.
func TestForegroundOutputIsHeldFake(t *testing.T) {
	ledger := caller.NewLedger(caller.Budget{Bytes: 5 << 20, TotalBytes: 8 << 20})
	var seen caller.Usage
	f := newSessionFake(t, func(c *Config) {
		c.Ledger = ledger
		c.Runner = usageRunner{ledger: ledger, account: alice.Account(), seen: &seen}
	})
	run := func(who caller.Caller, limit int) (int, string) {
		code, b := f.do(t, who, "POST", "/v1/run", fmt.Sprintf(`{"commands": [{"args": ["echo", "hi"], "output_limit_bytes": %d}]}`, limit))
		return code, string(b)
	}
	if code, b := run(alice, 2<<20); code != 200 {
		t.Fatalf("a run holding 4 MiB of a budget of 5: %d %s", code, b)
	}
	if seen.Bytes != 4<<20 {
		t.Errorf("while it ran its caller held %d bytes, want its two streams at 2 MiB", seen.Bytes)
	}
	if u := ledger.Usage(alice.Account()); u.Bytes != 0 {
		t.Errorf("after its answer its caller holds %d bytes", u.Bytes)
	}
	// More than the budget itself would never fit: a bad request.
	if code, b := run(alice, 3<<20); code != 400 || !strings.Contains(b, "output_limit_bytes") || !strings.Contains(b, "--max-held-bytes-per-caller") {
		t.Fatalf("a run holding 6 MiB of a budget of 5: %d %s, want 400", code, b)
	}
	// What alice holds leaves bob less of the service's total.
	id := f.create(t, alice, `{"output_limit_bytes": 2097152}`)
	cmds := "/v1/sessions/" + id + "/commands"
	if code, b := f.do(t, alice, "POST", cmds, `{"args": ["sleep"], "background": true}`); code != 201 {
		t.Fatalf("alice's background command: %d %s", code, b)
	}
	if code, b := run(bob, 5<<19); code != 429 || !strings.Contains(b, "--max-held-bytes)") {
		t.Fatalf("bob's run of 5 MiB beside alice's 4 in a total of 8: %d %s, want 429", code, b)
	}
	if code, b := f.do(t, alice, "POST", cmds, `{"args": ["echo", "hi"]}`); code != 429 || !strings.Contains(string(b), "--max-held-bytes-per-caller") {
		t.Fatalf("a foreground command holding 4 MiB beside the background one's 4: %d %s, want 429", code, b)
	}
	f.do(t, alice, "DELETE", "/v1/sessions/"+id, "")
	if code, b := f.do(t, alice, "POST", "/v1/sessions/"+f.create(t, alice, `{}`)+"/commands", `{"args": ["echo", "hi"]}`); code != 200 {
		t.Fatalf("a foreground command within the budget: %d %s", code, b)
	}
	if total, _ := ledger.Total(); total.Bytes != 0 {
		t.Errorf("with every answer written the ledger holds %d bytes", total.Bytes)
	}
}

// tcpFake serves scriptRunner on loopback TCP with token, under lim.
func tcpFake(t *testing.T, token string, lim connlimit.Limits) (addr string) {
	t.Helper()
	srv := New(Config{Runner: scriptRunner{}, Version: "test", Parallel: 2, Queue: 8, Token: token, Conns: lim})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveUntilCleanup(t, srv, l)
	return l.Addr().String()
}

// dialFrom connects to addr from the loopback address 127.0.0.last.
func dialFrom(t *testing.T, addr string, last byte) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, last)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// busy sends the headers of a request with the token whose body never
// comes: its connection is the token's, and busy.
func busy(c net.Conn, token string) {
	fmt.Fprintf(c, "POST /v1/run HTTP/1.1\r\nHost: isolate\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", token)
}

// version asks GET /v1/version on c with token and says the status (0:
// the connection was closed).
func version(c net.Conn, token string) int {
	fmt.Fprintf(c, "GET /v1/version HTTP/1.1\r\nHost: isolate\r\nAuthorization: Bearer %s\r\n\r\n", token)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Over TCP a connection counts as its token's once a request proved it,
// whatever its address: aliases of loopback (127.0.0.x) do not multiply
// what the token holds at once (--max-conns-per-uid).
func TestTCPConnectionsCountAsTheTokensFake(t *testing.T) {
	const token = "conn-token-0123456789"
	addr := tcpFake(t, token, connlimit.Limits{PerPeer: 2, Total: 64})
	busy(dialFrom(t, addr, 1), token)
	busy(dialFrom(t, addr, 2), token)
	// (The two may not be the token's yet: ask again until they are.)
	fdtest.WaitFor(t, "a third busy connection of the token, from 127.0.0.3, to be refused", func() bool {
		return version(dialFrom(t, addr, 3), token) == http.StatusTooManyRequests
	})
}

// Connections without the token, from the token holder's own address,
// never lock it out: beyond the address's share the oldest of them is
// closed to make room.
func TestTokenlessConnectionsNeverLockOutTheTokenFake(t *testing.T) {
	const token = "conn-token-0123456789"
	addr := tcpFake(t, token, connlimit.Limits{PerPeer: 4, Total: 64})
	for range 16 {
		dialFrom(t, addr, 1) // says nothing
	}
	if code := version(dialFrom(t, addr, 1), token); code != http.StatusOK {
		t.Fatalf("the token holder beside 16 silent connections of its address: %d, want 200", code)
	}
	// Nor do they at the service's total.
	addr = tcpFake(t, token, connlimit.Limits{PerPeer: 64, Total: 8})
	for i := range 16 {
		dialFrom(t, addr, byte(10+i))
	}
	if code := version(dialFrom(t, addr, 1), token); code != http.StatusOK {
		t.Fatalf("the token holder beside 16 silent connections at a total of 8: %d, want 200", code)
	}
}

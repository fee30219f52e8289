package main

// The service as a privilege boundary, against a real service of the
// test's own (a private unix socket, loopback TCP with a token) and the
// real binary: every capability of SECURITY.md's caller table, asked by
// root, by a member of the socket's group (over the API and through the
// CLI's handover) and by a TCP caller, gets what the table says.
// TestCallerTableCoversSecurityMD keeps the table and the cases in step.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The kinds of caller, as the columns of SECURITY.md's table (root's
// column covers its API requests and its handovers).
const (
	rootAPI        = "root-api"
	rootHandover   = "root-handover"
	memberAPI      = "member-api"
	memberHandover = "member-handover"
	tcpCaller      = "tcp"
)

// The socket group's members of these tests: two users, so that one's
// files can be asked for by the other.
const (
	boundaryGroup = 64124
	memberUID     = 65534
	otherUID      = 65533
	boundaryBox   = 944 // root's persistent box
	// optInGroup is a group memberUID is in and otherUID is not.
	optInGroup = 64125
	// memberSubUID is a subordinate uid of memberUID's, in the group.
	memberSubUID = 300005
)

// boundaryCase is one capability asked one way. Outcomes: "ok", "403
// FIELD" (refused by the policy), "400 FIELD" (beyond a cap, or a value
// the service does not take), "404" (not found), "refused FLAG" (the
// handover's one line naming the option, exit 2).
type boundaryCase struct {
	row  string            // the capability: the first column of SECURITY.md's table
	body string            // a command of a /v1/run request ("" : no API case)
	cli  []string          // run's options before "--" (nil: no handover case)
	want map[string]string // outcome by kind of caller
	// custom runs a case that is not one request (the file store, the
	// run slots); it checks what want says itself.
	custom func(t *testing.T, b *boundary)
}

// boundaryCases are the capabilities of SECURITY.md's caller table, each
// asked by every kind of caller it applies to. %[1]s in body and cli is
// the test's shared directory, %[2]s root's private one.
var boundaryCases = []boundaryCase{
	{row: "persistent boxes, box ids", body: fmt.Sprintf(`"box_id": %d`, boundaryBox), cli: []string{"-b", strconv.Itoa(boundaryBox)},
		want: map[string]string{rootAPI: "ok", rootHandover: "ok", memberAPI: "403 box_id", memberHandover: "refused --box-id", tcpCaller: "403 box_id"}},
	{row: "persistent boxes, box ids", custom: rootsBoxStaysRoots},
	{row: "images", body: `"image": "/"`, cli: []string{"--image", "/"},
		want: map[string]string{rootAPI: "ok", rootHandover: "ok", memberAPI: "403 image", memberHandover: "refused --image", tcpCaller: "403 image"}},
	{row: "seccomp profiles", body: `"seccomp": "%[1]s/profile.json"`, cli: []string{"--seccomp", "%[1]s/profile.json"},
		want: map[string]string{rootAPI: "ok", rootHandover: "ok", memberAPI: "403 seccomp", memberHandover: "refused --seccomp", tcpCaller: "403 seccomp"}},
	{row: "seccomp profiles", body: `"seccomp": "profile.json"`, cli: []string{"--seccomp", "profile.json"},
		want: map[string]string{memberAPI: "403 seccomp", memberHandover: "refused --seccomp", tcpCaller: "403 seccomp"}},
	{row: "net host", body: `"net": "host"`, cli: []string{"--net", "host"},
		want: map[string]string{rootAPI: "ok", rootHandover: "ok", memberAPI: "403 net", memberHandover: "refused --net", tcpCaller: "403 net"}},
	{row: "network allowlist", body: `"network": {"allow": ["127.0.0.1:9"]}`, cli: []string{"--net", "allow:127.0.0.1:9"},
		want: map[string]string{rootAPI: "ok", rootHandover: "ok", memberAPI: "ok", memberHandover: "ok", tcpCaller: "403 allow[0]"}},
	{row: "network allowlist", body: `"network": {"allow": ["127.0.0.1:9", "pypi.org"]}`, cli: []string{"--net", "allow:127.0.0.1:9,pypi.org"},
		want: map[string]string{rootAPI: "ok", rootHandover: "ok", memberAPI: "403 allow[1]", memberHandover: "refused --net", tcpCaller: "403 allow[0]"}},
	{row: "seccomp none", body: `"seccomp": "none"`, cli: []string{"--seccomp", "none"},
		want: map[string]string{rootAPI: "ok", rootHandover: "ok", memberAPI: "403 seccomp", memberHandover: "refused --seccomp", tcpCaller: "403 seccomp"}},
	{row: "host paths read", body: `"binds": [{"host": "%[1]s", "box": "/mnt"}]`, cli: []string{"--bind", "%[1]s:/mnt", "--copy-in", "%[1]s/own:/box/own", "--stdin", "%[1]s/own"},
		want: map[string]string{rootAPI: "ok", rootHandover: "ok", memberAPI: "403 binds", memberHandover: "ok", tcpCaller: "403 binds"}},
	{row: "host paths read", cli: []string{"--stdin", "%[2]s/secret"},
		want: map[string]string{rootHandover: "ok", memberHandover: "refused --stdin"}},
	{row: "host paths read", custom: stdinSaysNoMore},
	{row: "host paths read", custom: bindsReadAsTheCaller},
	{row: "host paths read", custom: bindsReadWithoutSupplementaryGroups},
	{row: "host paths read", custom: streamsAreChecked},
	{row: "host paths written", cli: []string{"--stdout", "%[2]s/out"},
		want: map[string]string{rootHandover: "ok", memberHandover: "refused"}},
	{row: "host paths written", cli: []string{"--stdout", "%[1]s/out-%[3]s", "--meta", "%[1]s/meta-%[3]s"},
		want: map[string]string{rootHandover: "ok", memberHandover: "ok"}},
	{row: "file store", custom: storeIsPerCaller},
	{row: "caps and limits", body: `"memory_bytes": 1073741824`, cli: []string{"--mem", "1G"},
		want: map[string]string{rootAPI: "400 memory_bytes", rootHandover: "ok", memberAPI: "400 memory_bytes", memberHandover: "refused --mem", tcpCaller: "400 memory_bytes"}},
	{row: "caps and limits", body: `"cpu_time_ms": 1000, "extra_time_ms": 60000`, cli: []string{"--time", "1", "--extra-time", "60"},
		want: map[string]string{rootAPI: "400 extra_time_ms", rootHandover: "ok", memberAPI: "400 extra_time_ms", memberHandover: "refused --extra-time", tcpCaller: "400 extra_time_ms"}},
	{row: "caps and limits", body: `"cpus": 2`, cli: []string{"--cpus", "2"},
		want: map[string]string{rootAPI: "400 cpus", rootHandover: "ok", memberAPI: "400 cpus", memberHandover: "refused --cpus", tcpCaller: "400 cpus"}},
	{row: "caps and limits", body: `"output_limit_bytes": -1`,
		want: map[string]string{rootAPI: "400 output_limit_bytes", memberAPI: "400 output_limit_bytes", tcpCaller: "400 output_limit_bytes"}},
	{row: "parallel slots", custom: handoverTakesASlot},
	{row: "sessions", custom: sessionsArePerCaller},
	{row: "audit trail", custom: auditNamesEveryCaller},
	{row: "every caller's sessions", custom: everyCallersSessions},
	{row: "metrics and health", custom: monitorRunsNothing},
	{row: "budget: sessions, background commands, held bytes", custom: budgetIsPerAccount},
	{row: "answers not read", custom: unreadAnswersHoldNoSlot},
	{row: "connections", custom: tokenlessConnectionsLockNoOneOut},
	{row: "request bodies", custom: bodiesPastMaxBody},
}

// boundary is the test's service and its callers.
type boundary struct {
	svc            *service
	shared, secret string // a directory every caller may read, and one only root may
	tcpAddr, token string
}

// TestCallerBoundary runs every case as each kind of caller.
func TestCallerBoundary(t *testing.T) {
	needRoot(t)
	b := newBoundary(t)
	for i, c := range boundaryCases {
		t.Run(fmt.Sprintf("%d %s", i, c.row), func(t *testing.T) {
			if c.custom != nil {
				c.custom(t, b)
				return
			}
			for _, kind := range []string{rootAPI, rootHandover, memberAPI, memberHandover, tcpCaller} {
				want, ok := c.want[kind]
				if !ok {
					continue
				}
				var got string
				if kind == rootHandover || kind == memberHandover {
					got = b.handover(t, kind, c.cli)
				} else {
					got = b.apiRun(t, kind, c.body)
				}
				if !strings.HasPrefix(got, want) {
					t.Errorf("%s: %s, want %s", kind, got, want)
				}
			}
		})
	}
}

func newBoundary(t *testing.T) *boundary {
	t.Helper()
	b := &boundary{shared: shareDir(t), secret: t.TempDir(), token: "boundary-token-0123456789"}
	tokenFile := filepath.Join(b.secret, "token")
	if err := os.WriteFile(tokenFile, []byte(b.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(b.shared, "profile.json"), []byte(`{"defaultAction": "SCMP_ACT_ALLOW"}`), 0o644)
	os.WriteFile(filepath.Join(b.shared, "own"), []byte("own\n"), 0o644)
	os.WriteFile(filepath.Join(b.secret, "secret"), []byte("root only\n"), 0o600)
	os.Chmod(b.shared, 0o777)
	// memberUID owns a range of subordinate uids.
	subuid := filepath.Join(b.secret, "subuid")
	if err := os.WriteFile(subuid, []byte(fmt.Sprintf("%d:%d:65536\n", memberUID, memberSubUID-5)), 0o644); err != nil {
		t.Fatal(err)
	}
	b.svc = ownService(t, "--socket-group", strconv.Itoa(boundaryGroup), "--listen", "127.0.0.1:0", "--token-file", tokenFile,
		"--max-mem", "256M", "--max-cpus", "1", "--max-time", "2s", "--parallel", "1", "--store-caller-quota", "1K",
		"--subuid-file", subuid, "--max-sessions-per-caller", "1", "--max-background-per-caller", "1", "--max-held-bytes-per-caller", "4M",
		"--net-allow-group", strconv.Itoa(optInGroup)+"=127.0.0.1:9,10.0.0.0/8",
		"--audit-file", filepath.Join(b.secret, "audit.log"), "--monitor-listen", "127.0.0.1:0",
		// A client that reads nothing holds its answer's connection this
		// long: no case waits for it.
		"--write-timeout", "10m")
	// The CLI's socket answers first; the API's listeners after the
	// service's self-test.
	var m []string
	waitFor(t, "the TCP address in the service's log", func() bool {
		m = regexp.MustCompile(` and (127\.0\.0\.1:[0-9]+) \(`).FindStringSubmatch(b.svc.log())
		return m != nil
	})
	b.tcpAddr = m[1]
	machineBox(t, boundaryBox)
	return b
}

// member is the credential of a socket-group member: memberUID (also in
// optInGroup) or otherUID.
func member(uid int) *syscall.Credential {
	groups := []uint32{boundaryGroup}
	if uid == memberUID {
		groups = append(groups, optInGroup)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: groups}
}

// expand fills a case's %[1]s (shared directory), %[2]s (root's) and
// %[3]s (the kind of caller, for files of its own).
func (b *boundary) expand(s, kind string) string {
	if !strings.Contains(s, "%[") {
		return s
	}
	return fmt.Sprintf(s, b.shared, b.secret, kind)
}

// handover runs `isolate run [opts] -- /bin/echo ran` through the
// service as kind, and says how it ended.
func (b *boundary) handover(t *testing.T, kind string, opts []string) string {
	t.Helper()
	args := []string{"run", "--json"}
	for _, o := range opts {
		args = append(args, b.expand(o, kind))
	}
	args = append(args, "--", "/bin/echo", "ran")
	cmd := exec.Command(isolateBin, args...)
	cmd.Env = handoverEnv(b.svc.cliSock)
	cmd.Dir = b.shared
	if kind == memberHandover {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: member(memberUID)}
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	code := cmd.ProcessState.ExitCode()
	var rep struct {
		Status  string
		Sandbox struct{ Via string }
	}
	json.Unmarshal([]byte(out.String()), &rep)
	switch {
	case code == 0 && rep.Status == "OK" && rep.Sandbox.Via == "service":
		return "ok"
	case code == 2 && strings.Count(errb.String(), "\n") == 1 && !strings.Contains(out.String(), "ran"):
		flag, _, _ := strings.Cut(strings.TrimPrefix(errb.String(), "isolate: "), " ")
		return "refused " + flag + " (" + strings.TrimSpace(errb.String()) + ")"
	}
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
}

// apiRun posts one command (body: more fields of it) as kind and says
// how it ended.
func (b *boundary) apiRun(t *testing.T, kind, body string) string {
	t.Helper()
	req := `{"commands": [{"args": ["/bin/echo", "ran"]`
	if body != "" {
		req += ", " + b.expand(body, kind)
	}
	req += "}]}"
	code, answer := b.api(t, kind, memberUID, "POST", "/v1/run", req)
	var e struct {
		Error   string `json:"error"`
		Field   string `json:"field"`
		Results []struct {
			Status string `json:"status"`
		} `json:"results"`
	}
	json.Unmarshal([]byte(answer), &e)
	switch {
	case code == 200 && len(e.Results) == 1 && e.Results[0].Status == "OK":
		return "ok"
	case code == 403 || code == 400:
		field := e.Field
		if i := strings.LastIndexByte(field, '.'); i >= 0 {
			field = field[i+1:]
		}
		return fmt.Sprintf("%d %s (%s)", code, field, e.Error)
	}
	return fmt.Sprintf("%d %s", code, answer)
}

// api sends one request as kind (a member: as uid) and returns the
// status and the body.
func (b *boundary) api(t *testing.T, kind string, uid int, method, path, body string) (int, string) {
	t.Helper()
	if kind == memberAPI {
		return b.apiAsMember(t, uid, method, path, body)
	}
	client := http.DefaultClient
	url := "http://" + b.tcpAddr + path
	if kind == rootAPI {
		sock := filepath.Join(b.svc.dir, "api.sock")
		client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
		url = "http://isolate" + path
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	// With --token-file every request carries the token, on the unix
	// socket too: the kernel's credentials still say who sent it there.
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}

// memberClient is an HTTP client on the unix socket, run as a member:
// the service knows its callers by the credentials the kernel recorded
// at connect (SO_PEERCRED), so the connection must be the member's own.
const memberClient = `
import http.client, socket, sys
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(sys.argv[1])
c = Unix("isolate")
body = sys.stdin.buffer.read()
c.request(sys.argv[2], sys.argv[3], body=body if body else None,
          headers={"Authorization": "Bearer " + sys.argv[4]})
r = c.getresponse()
sys.stdout.write("%d\n" % r.status)
sys.stdout.flush()
sys.stdout.buffer.write(r.read())
`

func (b *boundary) apiAsMember(t *testing.T, uid int, method, path, body string) (int, string) {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", memberClient, filepath.Join(b.svc.dir, "api.sock"), method, path, b.token)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: member(uid)}
	cmd.Stdin = strings.NewReader(body)
	cmd.Dir = "/"
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the member's client: %v %s", err, out)
	}
	status, answer, _ := strings.Cut(string(out), "\n")
	code, _ := strconv.Atoi(status)
	return code, answer
}

// rootsBoxStaysRoots: a member's `run -b N` of root's initialised box N
// neither runs in it nor reads root's files there.
func rootsBoxStaysRoots(t *testing.T, b *boundary) {
	cfgOut, err := exec.Command(isolateBin, "-b", strconv.Itoa(boundaryBox), "--init").Output()
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(strings.TrimSpace(string(cfgOut)), "box", "root-file")
	if err := os.WriteFile(secret, []byte("root-secret-944\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"run", "-b", strconv.Itoa(boundaryBox), "--", "/bin/cat", "root-file"},
		{"-b", strconv.Itoa(boundaryBox), "--run", "--", "/bin/cat", "root-file"},
	} {
		cmd := exec.Command(isolateBin, args...)
		cmd.Env = handoverEnv(b.svc.cliSock)
		cmd.Dir = b.shared
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: member(memberUID)}
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || strings.Contains(string(out), "root-secret") || !strings.Contains(string(out), "box id needs root") {
			t.Errorf("%q as a member: exit %d, %q: want refused", args, code, out)
		}
	}
	if got, err := os.ReadFile(secret); err != nil || string(got) != "root-secret-944\n" {
		t.Errorf("root's file in its box: %q %v", got, err)
	}
}

// stdinSaysNoMore: the refusal of a --stdin the member cannot reach says
// no more than for one that does not exist.
func stdinSaysNoMore(t *testing.T, b *boundary) {
	var lines []string
	for _, p := range []string{filepath.Join(b.secret, "secret"), filepath.Join(b.secret, "absent")} {
		got := b.handover(t, memberHandover, []string{"--stdin", p})
		lines = append(lines, strings.ReplaceAll(got, p, "PATH"))
	}
	if lines[0] != lines[1] || !strings.HasPrefix(lines[0], "refused --stdin") {
		t.Errorf("an existing root-only file: %s\na missing one: %s", lines[0], lines[1])
	}
}

// storeIsPerCaller: a member's stored file is its own (another member,
// a TCP caller: not found) and root's to read; a member's quota is its
// own.
func storeIsPerCaller(t *testing.T, b *boundary) {
	code, answer := b.api(t, memberAPI, memberUID, "POST", "/v1/files", "a member's file")
	var info struct{ ID string }
	if json.Unmarshal([]byte(answer), &info); code != 201 || info.ID == "" {
		t.Fatalf("upload as a member: %d %s", code, answer)
	}
	file := "/v1/files/" + info.ID
	for _, c := range []struct {
		what   string
		kind   string
		uid    int
		method string
		want   int
	}{
		{"another member reads it", memberAPI, otherUID, "GET", 404},
		{"another member deletes it", memberAPI, otherUID, "DELETE", 404},
		{"a TCP caller reads it", tcpCaller, 0, "GET", 404},
		{"its owner reads it", memberAPI, memberUID, "GET", 200},
		{"root reads it", rootAPI, 0, "GET", 200},
	} {
		if code, answer := b.api(t, c.kind, c.uid, c.method, file, ""); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.what, code, answer, c.want)
		}
	}
	// Another member's run cannot read it either.
	if code, answer := b.api(t, memberAPI, otherUID, "POST", "/v1/run",
		`{"commands": [{"args": ["/bin/cat"], "stdin": {"file": "`+info.ID+`"}}]}`); code != 400 || !strings.Contains(answer, "stdin.file") {
		t.Errorf("another member's run with it as stdin: %d %s", code, answer)
	}
	// --store-caller-quota 1K: the member's own quota, not the store's.
	if code, answer := b.api(t, memberAPI, memberUID, "POST", "/v1/files", strings.Repeat("x", 2048)); code != http.StatusInsufficientStorage {
		t.Errorf("beyond the member's quota: %d %s", code, answer)
	}
	if code, answer := b.api(t, rootAPI, 0, "POST", "/v1/files", strings.Repeat("x", 2048)); code != 201 {
		t.Errorf("root, within the store's quota: %d %s", code, answer)
	}
}

// sessionsArePerCaller: a session's spec meets the run's policy and
// caps; a member's session is its own (another member, root and a TCP
// caller: not found, as an unknown id), and so is a TCP caller's.
func sessionsArePerCaller(t *testing.T, b *boundary) {
	outcome := func(code int, answer string) string {
		var e struct{ Field string }
		json.Unmarshal([]byte(answer), &e)
		return fmt.Sprintf("%d %s", code, e.Field)
	}
	for _, c := range []struct{ kind, body, want string }{
		{memberAPI, `{"memory_bytes": 1073741824}`, "400 memory_bytes"},
		{rootAPI, `{"memory_bytes": 1073741824}`, "400 memory_bytes"},
		{tcpCaller, `{"memory_bytes": 1073741824}`, "400 memory_bytes"},
		{memberAPI, `{"net": "host"}`, "403 net"},
		{tcpCaller, `{"net": "host"}`, "403 net"},
		{memberAPI, `{"image": "/"}`, "403 image"},
		{memberAPI, `{"seccomp": "none"}`, "403 seccomp"},
		{memberAPI, `{"output_limit_bytes": -1}`, "400 output_limit_bytes"},
	} {
		if code, answer := b.api(t, c.kind, memberUID, "POST", "/v1/sessions", c.body); outcome(code, answer) != c.want {
			t.Errorf("%s: a session of %s: %d %s, want %s", c.kind, c.body, code, answer, c.want)
		}
	}
	type asker struct {
		kind string
		uid  int
	}
	for _, owner := range []asker{{memberAPI, memberUID}, {tcpCaller, 0}} {
		code, answer := b.api(t, owner.kind, owner.uid, "POST", "/v1/sessions", `{}`)
		var s struct{ ID string }
		if json.Unmarshal([]byte(answer), &s); code != 201 || s.ID == "" {
			t.Fatalf("a session of %s: %d %s", owner.kind, code, answer)
		}
		path := "/v1/sessions/" + s.ID
		_, unknown := b.api(t, owner.kind, owner.uid, "GET", "/v1/sessions/00000000000000000000000000000000", "")
		for _, other := range []asker{{memberAPI, otherUID}, {rootAPI, 0}, {tcpCaller, 0}, {memberAPI, memberUID}} {
			if other == owner {
				continue
			}
			if code, answer := b.api(t, other.kind, other.uid, "GET", path, ""); code != 404 || answer != unknown {
				t.Errorf("%s's session asked by %s %d: %d %s, want %s", owner.kind, other.kind, other.uid, code, answer, unknown)
			}
			if code, answer := b.api(t, other.kind, other.uid, "POST", path+"/commands", `{"args": ["/bin/true"]}`); code != 404 {
				t.Errorf("a command in %s's session by %s %d: %d %s", owner.kind, other.kind, other.uid, code, answer)
			}
			if code, answer := b.api(t, other.kind, other.uid, "DELETE", path, ""); code != 404 {
				t.Errorf("%s's session deleted by %s %d: %d %s", owner.kind, other.kind, other.uid, code, answer)
			}
		}
		if code, answer := b.api(t, owner.kind, owner.uid, "POST", path+"/commands", `{"args": ["/bin/echo", "ran"]}`); code != 200 || !strings.Contains(answer, `"status":"OK"`) {
			t.Errorf("a command in its own session (%s): %d %s", owner.kind, code, answer)
		}
		if code, answer := b.api(t, owner.kind, owner.uid, "DELETE", path, ""); code != 204 {
			t.Errorf("its own session deleted (%s): %d %s", owner.kind, code, answer)
		}
	}
}

// budgetIsPerAccount: one caller, one budget. A subordinate uid of a
// member counts as the member (its sessions are the member's in
// --max-sessions-per-caller, though it cannot reach them); the TCP token
// is one caller from any address; a background command holds one of
// the caller's --max-background-per-caller and its output at its limit
// in --max-held-bytes-per-caller (429 beyond either; 400 for output
// beyond the budget by itself).
func budgetIsPerAccount(t *testing.T, b *boundary) {
	session := func(kind string, uid int) (string, int, string) {
		code, answer := b.api(t, kind, uid, "POST", "/v1/sessions", `{"output_limit_bytes": 65536}`)
		var s struct{ ID string }
		json.Unmarshal([]byte(answer), &s)
		return s.ID, code, answer
	}
	id, code, answer := session(memberAPI, memberUID)
	if code != 201 {
		t.Fatalf("the member's session: %d %s", code, answer)
	}
	defer b.api(t, memberAPI, memberUID, "DELETE", "/v1/sessions/"+id, "")
	if _, code, answer := session(memberAPI, memberSubUID); code != 429 || !strings.Contains(answer, "--max-sessions-per-caller") {
		t.Errorf("a session of the member's subordinate uid beside the member's: %d %s, want 429", code, answer)
	}
	if code, _ := b.api(t, memberAPI, memberSubUID, "GET", "/v1/sessions/"+id, ""); code != 404 {
		t.Errorf("the member's session asked by its subordinate uid: %d, want 404", code)
	}
	if oid, code, answer := session(memberAPI, otherUID); code != 201 {
		t.Errorf("another member's session: %d %s", code, answer)
	} else {
		b.api(t, memberAPI, otherUID, "DELETE", "/v1/sessions/"+oid, "")
	}
	cmds := "/v1/sessions/" + id + "/commands"
	// A background command that alone would hold more than the budget
	// never fits: 400.
	if code, answer := b.api(t, memberAPI, memberUID, "POST", cmds, `{"args": ["/bin/sleep", "60"], "background": true, "output_limit_bytes": 4194304}`); code != 400 || !strings.Contains(answer, "output_limit_bytes") || !strings.Contains(answer, "--max-held-bytes-per-caller") {
		t.Errorf("a background command keeping 8 MiB under a budget of 4: %d %s, want 400", code, answer)
	}
	// A foreground request's output is held alike, from its admission;
	// one that alone would hold more than the budget never fits: 400.
	for _, kind := range []string{memberAPI, tcpCaller} {
		if got := b.apiRun(t, kind, `"output_limit_bytes": 4194304`); !strings.HasPrefix(got, "400") || !strings.Contains(got, "--max-held-bytes-per-caller") {
			t.Errorf("%s: a run keeping 8 MiB under a budget of 4: %s, want 400", kind, got)
		}
	}
	code, answer = b.api(t, memberAPI, memberUID, "POST", cmds, `{"args": ["/bin/sleep", "60"], "background": true}`)
	var p struct{ ID int }
	if json.Unmarshal([]byte(answer), &p); code != 201 {
		t.Fatalf("a background command: %d %s", code, answer)
	}
	// Beside what the member holds, a run or a background command that
	// alone would fit does not.
	if got := b.apiRun(t, memberAPI, `"output_limit_bytes": 2097152`); !strings.HasPrefix(got, "429") || !strings.Contains(got, "--max-held-bytes-per-caller") {
		t.Errorf("a run keeping 4 MiB beside a background command, under a budget of 4: %s, want 429", got)
	}
	if code, answer := b.api(t, memberAPI, memberUID, "POST", cmds, `{"args": ["/bin/true"], "background": true, "output_limit_bytes": 2060000}`); code != 429 || !strings.Contains(answer, "--max-held-bytes-per-caller") {
		t.Errorf("a background command keeping nearly 4 MiB beside another, under a budget of 4: %d %s, want 429", code, answer)
	}
	if code, answer := b.api(t, memberAPI, memberUID, "POST", cmds, `{"args": ["/bin/true"], "background": true}`); code != 429 || !strings.Contains(answer, "--max-background-per-caller") {
		t.Errorf("a second background command: %d %s, want 429", code, answer)
	}
	b.api(t, memberAPI, memberUID, "POST", fmt.Sprintf("%s/%d/signal", cmds, p.ID), `{"signal": "KILL"}`)
	b.api(t, memberAPI, memberUID, "POST", fmt.Sprintf("%s/%d/wait", cmds, p.ID), ``)
	// The token is one caller, whatever address it comes from.
	tid, code, answer := session(tcpCaller, 0)
	if code != 201 {
		t.Fatalf("the token's session: %d %s", code, answer)
	}
	defer b.api(t, tcpCaller, 0, "DELETE", "/v1/sessions/"+tid, "")
	alias := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
		return d.DialContext(ctx, network, addr)
	}}}
	req, _ := http.NewRequest("POST", "http://"+b.tcpAddr+"/v1/sessions", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := alias.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || !strings.Contains(string(body), "--max-sessions-per-caller") {
		t.Errorf("a second session of the token from 127.0.0.2: %d %s, want 429", resp.StatusCode, body)
	}
}

// bodiesPastMaxBody: a body past --max-body (4 MiB by default) is a 413
// for every caller of the API.
func bodiesPastMaxBody(t *testing.T, b *boundary) {
	body := `{"commands": [{"args": ["/bin/true", "` + strings.Repeat("x", 5<<20) + `"]}]}`
	for _, kind := range []string{rootAPI, tcpCaller} {
		if code, answer := b.api(t, kind, 0, "POST", "/v1/run", body); code != 413 || !strings.Contains(answer, "4194304") {
			t.Errorf("%s: a body of 5 MiB: %d %.200s, want 413", kind, code, answer)
		}
	}
	// The member announces 5 MiB and sends none of it: the answer comes
	// before the body is read.
	const announce = `
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"POST /v1/run HTTP/1.1\r\nHost: isolate\r\nAuthorization: Bearer " + sys.argv[2].encode() + b"\r\nContent-Length: 5242880\r\n\r\n")
sys.stdout.buffer.write(s.recv(65536))
`
	cmd := exec.Command("/usr/bin/python3", "-c", announce, filepath.Join(b.svc.dir, "api.sock"), b.token)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: member(memberUID)}
	cmd.Dir = "/"
	out, err := cmd.Output()
	if err != nil || !strings.HasPrefix(string(out), "HTTP/1.1 413") || !strings.Contains(string(out), "4194304") {
		t.Errorf("%s: a body of 5 MiB announced: %v %.300s, want 413", memberAPI, err, out)
	}
}

// tokenlessConnectionsLockNoOneOut: over TCP, connections without the
// token from the token holder's own address, more than
// --max-conns-per-uid of them, do not keep it out: a connection is the
// token's once its request proved it, its address's only until then,
// and the oldest of those make room for a new one.
func tokenlessConnectionsLockNoOneOut(t *testing.T, b *boundary) {
	for range 200 {
		c, err := net.Dial("tcp", b.tcpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() // says nothing
	}
	// A connection of its own, new.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("GET", "http://"+b.tcpAddr+"/v1/version", nil)
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the token holder beside 200 silent connections of its address: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("the token holder beside 200 silent connections of its address: %d", resp.StatusCode)
	}
}

// unreadAnswersHoldNoSlot: a TCP caller's streamed run whose answer is
// never read gives back its slot (--parallel 1) and its place once it
// ended, its output waiting within the token's held bytes (past them its
// live copy is cut): a member's run is answered next, long before the
// write timeout.
func unreadAnswersHoldNoSlot(t *testing.T, b *boundary) {
	conn, err := net.Dial("tcp", b.tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// (The sleep leaves the run in its slot long enough to be seen there.)
	body := `{"commands": [{"args": ["/bin/sh", "-c", "head -c 8M /dev/zero; sleep 1"], "output_limit_bytes": 1048576}]}`
	fmt.Fprintf(conn, "POST /v1/run HTTP/1.1\r\nHost: isolate\r\nAuthorization: Bearer %s\r\nAccept: application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s", b.token, len(body), body)
	running := func() int {
		_, answer := b.api(t, rootAPI, 0, "GET", "/v1/health", "")
		var h struct{ Running int }
		json.Unmarshal([]byte(answer), &h)
		return h.Running
	}
	waitFor(t, "the TCP caller's run to hold the slot", func() bool { return running() == 1 })
	waitFor(t, "the slot of the run whose answer is not read to be given back once it ended", func() bool { return running() == 0 })
	if got := b.apiRun(t, memberAPI, ""); got != "ok" {
		t.Errorf("a member's run beside the TCP caller's unread answer: %s", got)
	}
}

// handoverTakesASlot: with --parallel 1 taken by an API request, a
// member's handover waits in the API's queue; root's does not.
func handoverTakesASlot(t *testing.T, b *boundary) {
	sock := filepath.Join(b.svc.dir, "api.sock")
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"commands": [{"args": ["/bin/sleep", "600"], "wall_time_ms": 600000}]}`
	fmt.Fprintf(conn, "POST /v1/run HTTP/1.1\r\nHost: isolate\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", b.token, len(body), body)
	health := func() (running, waiting int) {
		_, answer := b.api(t, rootAPI, 0, "GET", "/v1/health", "")
		var h struct{ Running, Waiting int }
		json.Unmarshal([]byte(answer), &h)
		return h.Running, h.Waiting
	}
	waitFor(t, "the API's run to hold the slot", func() bool { r, _ := health(); return r == 1 })
	if got := b.handover(t, rootHandover, nil); got != "ok" {
		t.Errorf("root's handover beside a full service: %s", got)
	}
	cmd := exec.Command(isolateBin, "run", "--", "/bin/true")
	cmd.Env = handoverEnv(b.svc.cliSock)
	cmd.Dir = b.shared
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: member(memberUID)}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the member's handover to wait for the slot", func() bool { _, w := health(); return w == 1 })
	conn.Close() // the API's client goes: its box is killed, its slot freed
	if err := cmd.Wait(); err != nil {
		t.Errorf("the member's handover after the slot was freed: %v %s", err, errb.String())
	}
}

// TestCallerOptInGroups: --net-host-group and --seccomp-none-group (a
// comma list, or repeated) let their members who are not root ask net:
// host and seccomp: none, over the API and through the handover; other
// members of the socket's group are still refused.
func TestCallerOptInGroups(t *testing.T) {
	needRoot(t)
	b := &boundary{shared: shareDir(t), secret: t.TempDir(), token: "opt-in-token-0123456789"}
	os.Chmod(b.shared, 0o777)
	g := strconv.Itoa(optInGroup)
	b.svc = ownService(t, "--socket-group", strconv.Itoa(boundaryGroup), "--net-host-group", "64999,"+g, "--seccomp-none-group", g)
	for _, c := range []struct {
		body, field string
		cli         []string
	}{{`"net": "host"`, "net", []string{"--net", "host"}}, {`"seccomp": "none"`, "seccomp", []string{"--seccomp", "none"}}} {
		req := `{"commands": [{"args": ["/bin/true"], ` + c.body + `}]}`
		if code, answer := b.apiAsMember(t, memberUID, "POST", "/v1/run", req); code != 200 {
			t.Errorf("%s, a member of the group, over the API: %d %s", c.body, code, answer)
		}
		code, answer := b.apiAsMember(t, otherUID, "POST", "/v1/run", req)
		var e struct{ Field string }
		if json.Unmarshal([]byte(answer), &e); code != 403 || e.Field != "commands[0]."+c.field {
			t.Errorf("%s, not in the group, over the API: %d %s, want 403 naming %s", c.body, code, answer, c.field)
		}
		if got := b.handover(t, memberHandover, c.cli); got != "ok" {
			t.Errorf("%q, a member of the group, through the handover: %s", c.cli, got)
		}
		cmd := exec.Command(isolateBin, append(append([]string{"run"}, c.cli...), "--", "/bin/echo", "ran")...)
		cmd.Env = handoverEnv(b.svc.cliSock)
		cmd.Dir = b.shared
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: member(otherUID)}
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.HasPrefix(string(out), "isolate: "+c.cli[0]+" ") || strings.Contains(string(out), "ran") {
			t.Errorf("%q, not in the group, through the handover: exit %d %q", c.cli, code, out)
		}
	}
}

// TestCallerTableCoversSecurityMD: every row of SECURITY.md's caller
// table has a case in boundaryCases, and every case's row is in the
// table.
func TestCallerTableCoversSecurityMD(t *testing.T) {
	doc, err := os.ReadFile("../../SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "| TCP token caller | queue job (`--queue-url`) |") {
		t.Error("SECURITY.md's caller table lacks the queue job's column (caller.Queue)")
	}
	rows := callerTableRows(string(doc))
	if len(rows) < 10 {
		t.Fatalf("SECURITY.md's caller table has %d rows: %q", len(rows), rows)
	}
	cases := map[string]bool{}
	for _, c := range boundaryCases {
		cases[c.row] = true
	}
	for _, r := range rows {
		if !cases[r] {
			t.Errorf("SECURITY.md's caller table has %q, which no case of TestCallerBoundary checks", r)
		}
	}
	for r := range cases {
		if !contains(rows, r) {
			t.Errorf("TestCallerBoundary checks %q, which SECURITY.md's caller table lacks", r)
		}
	}
}

// callerTableRows are the first cells of the table under SECURITY.md's
// "Callers" heading whose header starts "| capability |".
func callerTableRows(doc string) []string {
	var rows []string
	inSection, inTable := false, false
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			inSection = strings.HasPrefix(line, "## Callers")
			inTable = false
		case inSection && strings.HasPrefix(line, "| capability |"):
			inTable = true
		case inTable && strings.HasPrefix(line, "|---"):
		case inTable && strings.HasPrefix(line, "|"):
			cell := strings.TrimSpace(strings.Split(line, "|")[1])
			rows = append(rows, strings.Trim(cell, "*"))
		case inTable:
			inTable = false
		}
	}
	return rows
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

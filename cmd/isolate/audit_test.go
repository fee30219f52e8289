package main

// The audit rows of SECURITY.md's caller table, against the boundary's
// real service (--audit-file, --monitor-listen).

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// auditLine is the part of an audit line these tests read.
type auditLine struct {
	RequestID string `json:"request_id"`
	FrontEnd  string `json:"front_end"`
	Endpoint  string `json:"endpoint"`
	Caller    struct {
		Via   string `json:"via"`
		UID   int    `json:"uid"`
		Owner string `json:"owner"`
	} `json:"caller"`
	Verdict  string `json:"verdict"`
	Exit     *int   `json:"exit"`
	Commands []struct {
		Status  string         `json:"status"`
		Asked   map[string]any `json:"asked"`
		Granted map[string]any `json:"granted"`
		BoxID   int            `json:"box_id"`
	} `json:"commands"`
}

// auditLines are the lines of the boundary's --audit-file.
func (b *boundary) auditLines(t *testing.T) []auditLine {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.secret, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []auditLine
	for _, raw := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var l auditLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("an audit line that is not JSON: %q", raw)
		}
		out = append(out, l)
	}
	return out
}

// auditLine is the line of request id, once written: the service writes
// it when the request settles, which may be just after its client has the
// answer.
func (b *boundary) auditLine(t *testing.T, id string) *auditLine {
	t.Helper()
	var found *auditLine
	waitFor(t, "the audit line of request "+id, func() bool {
		for _, l := range b.auditLines(t) {
			if l.RequestID == id {
				found = &l
				return true
			}
		}
		return false
	})
	return found
}

// auditNamesEveryCaller: every caller's request leaves one line naming
// it, and its answer (a handover's report too) the request's id.
func auditNamesEveryCaller(t *testing.T, b *boundary) {
	if st, err := os.Stat(filepath.Join(b.secret, "audit.log")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("--audit-file: %v, mode %v, want 0600", err, st.Mode())
	}
	for _, c := range []struct {
		kind, via, owner string
		uid              int
	}{{rootAPI, "api", "uid:0", 0}, {memberAPI, "api", "uid:65534", memberUID}, {tcpCaller, "tcp", "tcp", -1}} {
		code, answer := b.api(t, c.kind, memberUID, "POST", "/v1/run", `{"commands": [{"args": ["/bin/echo", "ran"], "cpu_time_ms": 1000}]}`)
		var rr struct {
			Results []struct {
				RequestID string `json:"request_id"`
			}
		}
		if json.Unmarshal([]byte(answer), &rr); code != 200 || len(rr.Results) != 1 || rr.Results[0].RequestID == "" {
			t.Errorf("%s: %d %s, want a report with its request_id", c.kind, code, answer)
			continue
		}
		l := b.auditLine(t, rr.Results[0].RequestID)
		if l == nil || l.FrontEnd != "api" || l.Endpoint != "POST /v1/run" || l.Caller.Via != c.via || l.Caller.UID != c.uid || l.Caller.Owner != c.owner ||
			l.Verdict != "OK" || len(l.Commands) != 1 || l.Commands[0].Asked["cpu_time_ms"] != 1000.0 || l.Commands[0].BoxID < 0 {
			t.Errorf("%s's audit line: %+v", c.kind, l)
		}
	}
	// A handed-over run: the report's request_id, and the cap granted.
	cmd := exec.Command(isolateBin, "run", "--json", "--", "/bin/echo", "ran")
	cmd.Env, cmd.Dir = handoverEnv(b.svc.cliSock), b.shared
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: member(memberUID)}
	out, err := cmd.Output()
	var rep struct {
		RequestID string `json:"request_id"`
	}
	if json.Unmarshal(out, &rep); err != nil || rep.RequestID == "" {
		t.Errorf("a member's handover: %v %s, want a report with its request_id", err, out)
	} else if l := b.auditLine(t, rep.RequestID); l == nil || l.FrontEnd != "handover" || l.Endpoint != "run" || l.Caller.UID != memberUID ||
		l.Verdict != "OK" || l.Exit == nil || *l.Exit != 0 || len(l.Commands) != 1 || l.Commands[0].Granted["memory_bytes"] != float64(256<<20) {
		t.Errorf("the handover's audit line: %+v", l)
	}
	// A refused handover leaves its line too.
	before := len(b.auditLines(t))
	if got := b.handover(t, memberHandover, []string{"--net", "host"}); !strings.HasPrefix(got, "refused --net") {
		t.Errorf("net host handed over by a member: %s", got)
	}
	waitFor(t, "the refused handover's line", func() bool { return len(b.auditLines(t)) > before })
	lines := b.auditLines(t)
	if len(lines) != before+1 || lines[before].FrontEnd != "handover" || lines[before].Verdict != "refused" || lines[before].Caller.UID != memberUID {
		t.Errorf("the refused handover's line: %+v", lines[before:])
	}
	// The service's standard error has the same lines.
	if id := lines[before].RequestID; !strings.Contains(b.svc.log(), `"request_id":"`+id+`"`) {
		t.Errorf("the service's log lacks the line of %s", id)
	}
}

// everyCallersSessions: root sees every caller's sessions with their
// owners (all=1); any other caller asking that is refused.
func everyCallersSessions(t *testing.T, b *boundary) {
	code, answer := b.api(t, memberAPI, memberUID, "POST", "/v1/sessions", `{}`)
	var s struct{ ID string }
	if json.Unmarshal([]byte(answer), &s); code != 201 {
		t.Fatalf("a member's session: %d %s", code, answer)
	}
	defer b.api(t, memberAPI, memberUID, "DELETE", "/v1/sessions/"+s.ID, "")
	code, answer = b.api(t, rootAPI, 0, "GET", "/v1/sessions?all=1", "")
	if code != 200 || !strings.Contains(answer, `"id":"`+s.ID+`"`) || !strings.Contains(answer, `"owner":"uid:65534"`) {
		t.Errorf("root's all=1: %d %s", code, answer)
	}
	if code, answer := b.api(t, rootAPI, 0, "GET", "/v1/sessions/"+s.ID+"?all=1", ""); code != 200 || !strings.Contains(answer, `"owner":"uid:65534"`) {
		t.Errorf("root looking at the member's session: %d %s", code, answer)
	}
	for _, who := range []struct {
		kind string
		uid  int
	}{{memberAPI, otherUID}, {memberAPI, memberUID}, {tcpCaller, 0}} {
		if code, answer := b.api(t, who.kind, who.uid, "GET", "/v1/sessions?all=1", ""); code != 403 || !strings.Contains(answer, `"field":"all"`) {
			t.Errorf("all=1 asked by %s %d: %d %s, want 403 naming all", who.kind, who.uid, code, answer)
		}
	}
}

// monitorRunsNothing: the monitor listener answers /metrics (with the
// per-caller usage) and /v1/health without the token, and nothing else;
// the TCP API still wants its token for them.
func monitorRunsNothing(t *testing.T, b *boundary) {
	m := regexp.MustCompile(`monitor \(/metrics, /v1/health\) on (127\.0\.0\.1:[0-9]+)`).FindStringSubmatch(b.svc.log())
	if m == nil {
		t.Fatalf("no monitor address in the service's log:\n%s", b.svc.log())
	}
	b.api(t, memberAPI, memberUID, "POST", "/v1/run", `{"commands": [{"args": ["/bin/true"]}]}`)
	get := func(method, url, body string) (int, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		a, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(a)
	}
	mon := "http://" + m[1]
	if code, answer := get("GET", mon+"/metrics", ""); code != 200 || !strings.Contains(answer, `isolate_caller_commands{caller="uid:65534"}`) {
		t.Errorf("the monitor's /metrics: %d, no per-caller usage:\n%.3000s", code, answer)
	}
	if code, answer := get("GET", mon+"/v1/health", ""); code != 200 || !strings.Contains(answer, `"ready":true`) {
		t.Errorf("the monitor's /v1/health: %d %s", code, answer)
	}
	if code, answer := get("POST", mon+"/v1/run", `{"commands": [{"args": ["/bin/echo", "ran"]}]}`); code != 404 || strings.Contains(answer, "ran") {
		t.Errorf("POST /v1/run on the monitor: %d %s, want 404", code, answer)
	}
	if code, _ := get("GET", "http://"+b.tcpAddr+"/metrics", ""); code != 401 {
		t.Errorf("/metrics on the TCP API without the token: %d, want 401", code)
	}
}

package queue

// SECURITY.md's caller table, the queue job's column, through a real
// worker: every row is asked by at least one job, and a refusal is the
// API's answer stored as the job's result and a dead letter with the
// API's message. (cmd/isolate's TestCallerBoundary asks the other
// columns against a service of its own.)

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// queueCase is one job asking a capability of a row. want: "ok" (run,
// its command OK), "403 FIELD" or "400 FIELD" (refused, naming the
// field's last part, and dead-lettered).
type queueCase struct {
	row, body, endpoint, want string
	// check, when set, judges the answer beyond want.
	check func(t *testing.T, body string)
}

// malformedEndpoint: the job is not even run: dead-lettered for its
// endpoint, with no answer of the service.
const malformedEndpoint = "malformed endpoint"

// queueCases asks each row; %s in a body is the id of a file root
// stored through the worker's API.
var queueCases = []queueCase{
	{row: "persistent boxes, box ids", body: `{"commands":[{"args":["/bin/true"],"box_id":944}]}`, want: "403 box_id"},
	{row: "images", body: `{"commands":[{"args":["/bin/true"],"image":"/"}]}`, want: "403 image"},
	{row: "images", body: `{"commands":[{"args":["/bin/true"],"image":"host"}]}`, want: "ok"},
	{row: "seccomp profiles", body: `{"commands":[{"args":["/bin/true"],"seccomp":"/etc/passwd"}]}`, want: "403 seccomp"},
	{row: "seccomp profiles", body: `{"commands":[{"args":["/bin/true"],"seccomp":"profile.json"}]}`, want: "403 seccomp"},
	{row: "seccomp profiles", body: `{"commands":[{"args":["/bin/true"],"seccomp":"default"}]}`, want: "ok"},
	{row: "net host", body: `{"commands":[{"args":["/bin/true"],"net":"host"}]}`, want: "403 net"},
	{row: "seccomp none", body: `{"commands":[{"args":["/bin/true"],"seccomp":"none"}]}`, want: "403 seccomp"},
	{row: "network allowlist", body: `{"commands":[{"args":["/bin/true"],"network":{"allow":["127.0.0.1:9"]}}]}`, want: "403 allow[0]"},
	{row: "host paths read", body: `{"commands":[{"args":["/bin/true"],"binds":[{"host":"/etc","box":"/mnt"}]}]}`, want: "403 binds"},
	// What a job writes comes back in its result, in Redis: a copied-out
	// file inline, never a host path.
	{row: "host paths written", body: `{"commands":[{"args":["/bin/sh","-c","echo out > /box/f"],"copy_out":[{"path":"/box/f"}]}]}`, want: "ok",
		check: func(t *testing.T, body string) {
			if !strings.Contains(body, `"path":"/box/f","size":4,`) || !strings.Contains(body, `"text":"out\n"`) {
				t.Errorf("the copied-out file is not in the result: %s", body)
			}
		}},
	// Root's file is not the queue's.
	{row: "file store", body: `{"commands":[{"args":["/bin/cat"],"stdin":{"file":"%s"}}]}`, want: "400 file"},
	{row: "caps and limits", body: `{"commands":[{"args":["/bin/true"],"memory_bytes":1073741824}]}`, want: "400 memory_bytes"},
	{row: "caps and limits", body: `{"commands":[{"args":["/bin/true"],"output_limit_bytes":-1}]}`, want: "400 output_limit_bytes"},
	// One slot per command: a job may run as many commands as the
	// service has slots (--parallel 2), no more.
	{row: "parallel slots", body: `{"commands":[{"args":["/bin/true"]},{"args":["/bin/true"]}]}`, want: "ok"},
	{row: "parallel slots", body: `{"commands":[{"args":["/bin/true"]},{"args":["/bin/true"]},{"args":["/bin/true"]}]}`, want: "400 commands"},
	// A job names run or exec: nothing reaches a session.
	{row: "sessions", endpoint: "sessions", body: `{}`, want: malformedEndpoint},
	// Its result names its request, whose audit line the worker wrote
	// (checked once the cases are answered).
	{row: "audit trail", body: `{"commands":[{"args":["/bin/true"]}]}`, want: "ok",
		check: func(t *testing.T, body string) {
			m := regexp.MustCompile(`"request_id":"([0-9a-f]+)"`).FindStringSubmatch(body)
			if m == nil {
				t.Errorf("the result names no request: %s", body)
				return
			}
			auditedJob = m[1]
		}},
	// Nor the admin view of sessions, nor the monitor's endpoints.
	{row: "every caller's sessions", endpoint: "sessions", body: `{}`, want: malformedEndpoint},
	{row: "metrics and health", endpoint: "metrics", body: `{}`, want: malformedEndpoint},
	// The queue's budget: no session, so no background command either.
	{row: "budget: sessions, background commands, held bytes", endpoint: "sessions", body: `{}`, want: malformedEndpoint},
	// Output comes back in the result, however large: no client reads
	// it late, or over a connection of the service's.
	{row: "answers not read", body: `{"commands":[{"args":["/bin/sh","-c","head -c 100000 /dev/zero"]}]}`, want: "ok"},
	{row: "connections", body: `{"commands":[{"args":["/bin/true"]}]}`, want: "ok"},
	// A body past --max-body (64K here) is never read: a dead letter.
	{row: "request bodies", body: `{"commands":[{"args":["/bin/true","` + strings.Repeat("x", 70000) + `"]}]}`, want: pastMaxBody},
}

// pastMaxBody: the job is not even read: dead-lettered for its body's
// length, with no answer of the service.
const pastMaxBody = "past --max-body"

// auditedJob is the request id of the audit trail's case.
var auditedJob string

// queueColumn is SECURITY.md's caller table: each row's first cell and
// its queue job cell.
func queueColumn(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile("../../SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	inSection, col := false, -1
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		switch {
		case strings.HasPrefix(line, "## "):
			inSection, col = strings.HasPrefix(line, "## Callers"), -1
		case inSection && strings.HasPrefix(line, "| capability |"):
			for i, c := range cells {
				if strings.HasPrefix(strings.TrimSpace(c), "queue job") {
					col = i
				}
			}
			if col < 0 {
				t.Fatalf("SECURITY.md's caller table has no queue job column: %s", line)
			}
		case col >= 0 && strings.HasPrefix(line, "|---"):
		case col >= 0 && strings.HasPrefix(line, "|") && len(cells) > col:
			rows[strings.TrimSpace(cells[1])] = strings.TrimSpace(cells[col])
		case col >= 0:
			col = -1
		}
	}
	return rows
}

func TestQueueCallerTable(t *testing.T) {
	rows := queueColumn(t)
	if len(rows) < 10 {
		t.Fatalf("SECURITY.md's caller table has %d rows: %v", len(rows), rows)
	}
	asked := map[string]bool{}
	for _, c := range queueCases {
		if _, ok := rows[c.row]; !ok {
			t.Errorf("a queue case asks %q, which SECURITY.md's caller table lacks", c.row)
		}
		asked[c.row] = true
	}
	refusedBy := regexp.MustCompile("^refused \\(`([a-z_]+)`")
	for r, cell := range rows {
		if !asked[r] {
			t.Errorf("SECURITY.md's caller table has %q (queue job: %q), which no queue case asks", r, cell)
		}
		// A cell that names the field a job is refused by: a case of
		// its row sees that refusal.
		if m := refusedBy.FindStringSubmatch(cell); m != nil && !hasCase(r, m[1]) {
			t.Errorf("%s: the table's queue cell %q refuses %s; no case sees it", r, cell, m[1])
		}
	}
	if t.Failed() {
		return
	}

	g := newRig(t)
	ctx := context.Background()
	startRedis(t, g.r)
	// Two slots, and one job at a time.
	w := g.start(t, "c0", "--parallel", "2", "--queue-capacity", "1", "--max-mem", "256M", "--max-body", "64K")
	waitFor(t, "c0 answers", func() bool { r, _ := g.health(t, w); return r == 0 })
	resp, err := g.api(w).Post("http://isolate/v1/files", "application/octet-stream", strings.NewReader("root's file\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rootFile struct{ ID string }
	if json.Unmarshal(b, &rootFile); resp.StatusCode != 201 || rootFile.ID == "" {
		t.Fatalf("root's upload: %d %s", resp.StatusCode, b)
	}
	pipe := g.rdb.Pipeline()
	for i, c := range queueCases {
		endpoint := c.endpoint
		if endpoint == "" {
			endpoint = "run"
		}
		body := strings.ReplaceAll(c.body, "%s", rootFile.ID)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", fmt.Sprintf("case-%d", i),
			"endpoint", endpoint, "body", body}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(queueCases))
	for i := range queueCases {
		ids[i] = fmt.Sprintf("case-%d", i)
	}
	waitFor(t, "every case has a result", func() bool {
		return g.rdb.Exists(ctx, resultKeys(g.keys, ids)...).Val() == int64(len(ids))
	})
	dead := map[string]string{}
	for _, m := range g.rdb.XRange(ctx, g.keys.Dead, "-", "+").Val() {
		dead[m.Values["id"].(string)] = m.Values["reason"].(string)
	}
	for i, c := range queueCases {
		res := g.rdb.HGetAll(ctx, g.keys.Result(ids[i])).Val()
		if c.want == malformedEndpoint {
			if res["status"] != "" || !strings.Contains(dead[ids[i]], "endpoint") || res["dead_letter"] != dead[ids[i]] {
				t.Errorf("%s: endpoint %s: result %v, dead letter %q", c.row, c.endpoint, res, dead[ids[i]])
			}
			continue
		}
		if c.want == pastMaxBody {
			if res["status"] != "" || !strings.Contains(dead[ids[i]], "--max-body") || res["dead_letter"] != dead[ids[i]] {
				t.Errorf("%s: result %v, dead letter %q", c.row, res, dead[ids[i]])
			}
			continue
		}
		got := outcomeOf(res["status"], res["body"])
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%s, %s: %s, want %s", c.row, c.body, got, c.want)
			continue
		}
		if c.check != nil {
			c.check(t, res["body"])
		}
		var e struct{ Error string }
		json.Unmarshal([]byte(res["body"]), &e)
		switch {
		case c.want == "ok" && dead[ids[i]] != "":
			t.Errorf("%s, %s: answered, and a dead letter %q", c.row, c.body, dead[ids[i]])
		case c.want != "ok" && (dead[ids[i]] == "" || dead[ids[i]] != e.Error || res["dead_letter"] != e.Error):
			t.Errorf("%s, %s: refused with %q; dead letter %q, the result's %q", c.row, c.body, e.Error, dead[ids[i]], res["dead_letter"])
		}
	}

	if line := `"request_id":"` + auditedJob + `","front_end":"queue"`; auditedJob == "" || !strings.Contains(w.log.String(), line) {
		t.Errorf("audit trail: no line %s in the worker's log", line)
	}

	// File store: a job's stored file is the queue's, which a later job
	// reads (and root, who reads every file).
	g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", "store", "body",
		`{"commands":[{"args":["/bin/sh","-c","echo queued > /box/f"],"copy_out":[{"path":"/box/f","store":true}]}]}`}})
	waitFor(t, "the storing job is answered", func() bool { return g.rdb.Exists(ctx, g.keys.Result("store")).Val() == 1 })
	var stored struct {
		Results []struct {
			CopyOut []struct{ File, Error string } `json:"copy_out"`
		} `json:"results"`
	}
	body := g.rdb.HGet(ctx, g.keys.Result("store"), "body").Val()
	if json.Unmarshal([]byte(body), &stored); len(stored.Results) != 1 || len(stored.Results[0].CopyOut) != 1 || stored.Results[0].CopyOut[0].File == "" {
		t.Fatalf("file store: a job's copy_out with store: %s", body)
	}
	id := stored.Results[0].CopyOut[0].File
	g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", "reread", "body",
		`{"commands":[{"args":["/bin/cat"],"stdin":{"file":"` + id + `"}}]}`}})
	waitFor(t, "the reading job is answered", func() bool { return g.rdb.Exists(ctx, g.keys.Result("reread")).Val() == 1 })
	body = g.rdb.HGet(ctx, g.keys.Result("reread"), "body").Val()
	if got := outcomeOf(g.rdb.HGet(ctx, g.keys.Result("reread"), "status").Val(), body); got != "ok" || !strings.Contains(body, `"stdout":"queued\n"`) {
		t.Errorf("file store: a job reading the queue's file: %s", body)
	}
	if resp, err := g.api(w).Get("http://isolate/v1/files/" + id); err != nil || resp.StatusCode != 200 {
		t.Errorf("file store: root reading the queue's file: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Parallel slots: no more jobs than --queue-capacity; the second
	// is not even delivered while the first runs.
	for _, id := range []string{"slow-1", "slow-2"} {
		g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", id, "body",
			`{"commands":[{"args":["/bin/sh","-c","sleep 3; : ` + g.marker + "-" + id + `"]}]}`}})
	}
	waitFor(t, "slow-1 runs, and slow-2 waits", func() bool {
		pid := pidWith(g.marker + "-slow-1")
		if pid == 0 {
			return false
		}
		pending := g.rdb.XPending(ctx, g.keys.Jobs, "isolate-workers").Val()
		length := g.rdb.XLen(ctx, g.keys.Jobs).Val()
		if pidWith(g.marker+"-slow-1") != pid {
			return false // ended meanwhile: look again at the next
		}
		if pending.Count != 1 || length != 2 {
			t.Errorf("while slow-1 runs: %d jobs pending, %d in the stream; want 1 and 2", pending.Count, length)
		}
		return true
	})
	waitFor(t, "both slow jobs are answered", func() bool {
		return g.rdb.Exists(ctx, g.keys.Result("slow-1"), g.keys.Result("slow-2")).Val() == 2
	})
	w.stop(t)
	g.nothingLeft(t)
}

// pidWith is a process whose command line holds marker, or 0.
func pidWith(marker string) int {
	cmds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmds {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(marker)) && !bytes.Contains(b, []byte("queue.test")) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	return 0
}

// hasCase tells whether a case of row is refused naming field.
func hasCase(row, field string) bool {
	for _, c := range queueCases {
		if c.row == row && strings.HasSuffix(c.want, " "+field) {
			return true
		}
	}
	return false
}

// outcomeOf says how a job's result ended: "ok" (every command OK),
// "STATUS FIELD (message)" for a refusal, else the status and body.
func outcomeOf(status, body string) string {
	var r struct {
		Error   string `json:"error"`
		Field   string `json:"field"`
		Results []struct {
			Status string `json:"status"`
		} `json:"results"`
	}
	json.Unmarshal([]byte(body), &r)
	switch {
	case status == "200" && len(r.Results) > 0:
		for _, c := range r.Results {
			if c.Status != "OK" {
				return status + " " + body
			}
		}
		return "ok"
	case status == "403" || status == "400":
		field := r.Field
		if i := strings.LastIndexByte(field, '.'); i >= 0 {
			field = field[i+1:]
		}
		return fmt.Sprintf("%s %s (%s)", status, field, r.Error)
	}
	return status + " " + body
}

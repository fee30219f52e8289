package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/internal/fdtest"
	"github.com/isolate-sandbox/isolate/service/caller"
)

func TestRunTrue(t *testing.T) {
	s := startService(t, nil)
	resp := s.run(t, `{"commands":[{"args":["/bin/true"]}]}`)
	if len(resp.Results) != 1 || resp.Results[0].Status != "OK" {
		t.Fatalf("results: %+v", resp.Results)
	}
	r := resp.Results[0]
	// The CLI's defaults hold: the report names the host image and the
	// default policy.
	if r.Sandbox.Image != "host" || r.Sandbox.Seccomp != "default" || r.ExitCode != 0 {
		t.Fatalf("report: %+v", r.Report)
	}
}

func TestRunReportIsTheCLIs(t *testing.T) {
	s := startService(t, nil)
	_, b := s.do(t, "POST", "/v1/run", `{"commands":[{"args":["/bin/sh","-c","exit 3"]}]}`)
	var raw struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	// Every key of the contract's report, the service's request id, and
	// no other.
	want := strings.Fields(`status message exit_code signal killed limit cpu_time user_time sys_time wall_time
		memory_peak max_rss oom_killed pids_peak csw_voluntary csw_involuntary stdout stderr
		stdout_truncated stderr_truncated blocked_syscalls box_id sandbox request_id`)
	got := raw.Results[0]
	for _, k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("report has %d keys, want %d: %v", len(got), len(want), got)
	}
	if got["status"] != "RE" || got["exit_code"] != 3.0 {
		t.Errorf("status %v exit %v", got["status"], got["exit_code"])
	}
}

func TestRunStreamsAndFiles(t *testing.T) {
	s := startService(t, nil)
	code, b := s.do(t, "POST", "/v1/files", "from the store\n")
	if code != http.StatusCreated {
		t.Fatalf("upload: %d %s", code, b)
	}
	var up struct{ ID string }
	json.Unmarshal(b, &up)
	script := `cat; cat /box/a /box/b /tmp/c; echo err >&2; printf '\377\376' > /box/bin; chmod 750 /box/bin; seq 1 1000 > /box/big; echo kept > /box/kept; ls -l /box/a | cut -c1-10`
	req := map[string]any{"commands": []any{map[string]any{
		"args":  []string{"/bin/sh", "-c", script},
		"stdin": map[string]any{"file": up.ID},
		"copy_in": []any{
			map[string]any{"path": "/box/a", "text": "text\n", "mode": 0o600},
			map[string]any{"path": "/box/b", "base64": base64.StdEncoding.EncodeToString([]byte("b64\n"))},
			map[string]any{"path": "/tmp/c", "file": up.ID},
		},
		"copy_out": []any{
			map[string]any{"path": "/box/bin"},
			map[string]any{"path": "/box/big", "inline_max_bytes": 10},
			map[string]any{"path": "/box/kept", "store": true},
		},
		"stderr": map[string]any{"collect": map[string]any{"max_bytes": 2}},
	}}}
	resp := s.run(t, mustJSON(req))
	r := resp.Results[0]
	if r.Status != "OK" {
		t.Fatalf("%s: %s", r.Status, r.Message)
	}
	if want := "from the store\ntext\nb64\nfrom the store\n-rw-------\n"; r.Stdout != want {
		t.Errorf("stdout %q, want %q", r.Stdout, want)
	}
	if r.Stderr != "er" || !r.StderrTruncated {
		t.Errorf("stderr %q truncated %v", r.Stderr, r.StderrTruncated)
	}
	co := r.CopyOut
	if len(co) != 3 {
		t.Fatalf("copy_out: %+v", co)
	}
	if string(co[0].Base64) != "\xff\xfe" || co[0].Text != nil || co[0].Mode != 0o750 || co[1].Mode != 0o644 {
		t.Errorf("binary copy_out: %+v", co[0])
	}
	if co[1].Text == nil || *co[1].Text != "1\n2\n3\n4\n5\n" || !co[1].Truncated || co[1].Size != 3893 {
		t.Errorf("cut copy_out: %+v", co[1])
	}
	if co[2].File == "" {
		t.Fatalf("stored copy_out: %+v", co[2])
	}
	if code, b := s.do(t, "GET", "/v1/files/"+co[2].File, ""); code != 200 || string(b) != "kept\n" {
		t.Errorf("stored copy_out: %d %q", code, b)
	}
	// A file that cannot be copied out fails the run, as the CLI's
	// --copy-out does, naming the file.
	resp = s.run(t, `{"commands":[{"args":["/bin/true"],"copy_out":[{"path":"/box/absent"}]}]}`)
	if r := resp.Results[0]; r.Status != "XX" || !strings.Contains(r.Message, "/box/absent") {
		t.Errorf("absent copy_out: %s %q", r.Status, r.Message)
	}
}

func TestBadRequests(t *testing.T) {
	s := startService(t, func(c *Config) { c.Policy.Caps = caller.Caps{MemoryBytes: 256 << 20, CPUTimeMs: 5000} })
	for _, tc := range []struct {
		body, field string
	}{
		{`{"commands":[{"args":["/bin/true"]}`, "(body)"},
		{``, "(body)"},
		{`{"commands":[{"args":["/bin/true"]}]} {}`, "(body)"},
		{`{"commands":[]}`, "commands"},
		{`{"commands":[{"args":["/bin/true"],"stdin":{"txt":"x"}}]}`, "commands[0].stdin.txt"},
		{`{"commands":[{"args":["/bin/true"]}],"pipez":[]}`, "pipez"},
		{`{"commands":[{"args":["/bin/true"],"memory_bytes":"1G"}]}`, "commands[0].memory_bytes"},
		{`{"commands":[{"args":["/bin/true"],"memory_bytes":-5}]}`, "commands[0].memory_bytes"},
		{`{"commands":[{"args":["/bin/true"],"memory_bytes":1073741824}]}`, "commands[0].memory_bytes"},
		{`{"commands":[{"args":["/bin/true"],"memory_bytes":-1}]}`, "commands[0].memory_bytes"},
		{`{"commands":[{"args":["/bin/true"],"cpu_time_ms":6000}]}`, "commands[0].cpu_time_ms"},
		{`{"commands":[{"args":[]}]}`, "commands[0].args"},
		{`{"commands":[{"args":["/bin/true"],"stdin":{"text":"a","file":"b"}}]}`, "commands[0].stdin"},
		{`{"commands":[{"args":["/bin/true"],"stdin":{"file":"0123456789abcdef0123456789abcdef"}}]}`, "commands[0].stdin.file"},
		{`{"commands":[{"args":["/bin/true"],"copy_in":[{"path":"box/x","text":""}]}]}`, "commands[0].copy_in[0].path"},
		{`{"commands":[{"args":["/bin/true"],"copy_out":[{"path":"/box/../etc/passwd"}]}]}`, "commands[0].copy_out[0].path"},
		{`{"commands":[{"args":["/bin/true"]}],"pipes":[{"from":{"cmd":0,"fd":1},"to":{"cmd":1,"fd":0}}]}`, "pipes[0].to.cmd"},
		{`{"commands":[{"args":["/bin/true"]},{"args":["/bin/true"]}],"pipes":[{"from":{"cmd":0,"fd":0},"to":{"cmd":1,"fd":0}}]}`, "pipes[0].from.fd"},
		{`{"commands":[{"args":["/bin/true"],"stdout":{"pipe":true}}]}`, "commands[0].stdout"},
		{`{"commands":[{"args":["/bin/true"],"net":"wifi"}]}`, "commands[0].net"},
	} {
		code, b := s.do(t, "POST", "/v1/run", tc.body)
		var e errorBody
		json.Unmarshal(b, &e)
		if code != http.StatusBadRequest || e.Field != tc.field || e.Error == "" {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.body, code, b, tc.field)
		}
	}
	// A request that leaves a capped limit at a larger default gets the cap.
	resp := s.run(t, `{"commands":[{"args":["/bin/sh","-c","cat /sys/fs/cgroup/memory.max 2>/dev/null; exit 0"]}]}`)
	if resp.Results[0].Status != "OK" {
		t.Fatalf("capped default: %+v", resp.Results[0].Report)
	}
}

// A caller who is not root on the unix socket names no host path.
func TestNotRootCallerHasNoHostPaths(t *testing.T) {
	s := startService(t, nil)
	post := func(body string) (string, error) {
		cmd := exec.Command("curl", "-s", "--unix-socket", s.sock, "-d", body, "http://isolate/v1/run")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		return string(out), err
	}
	out, err := post(`{"commands":[{"args":["/bin/true"]}]}`)
	if err != nil || !strings.Contains(out, `"status":"OK"`) {
		t.Fatalf("plain run as nobody: %v %s", err, out)
	}
	for field, body := range map[string]string{
		"commands[0].binds":   `{"commands":[{"args":["/bin/true"],"binds":[{"host":"/etc","box":"/etc2"}]}]}`,
		"commands[0].image":   `{"commands":[{"args":["/bin/true"],"image":"/var/lib/isolate/images/c.sqfs"}]}`,
		"commands[0].seccomp": `{"commands":[{"args":["/bin/true"],"seccomp":"/etc/passwd"}]}`,
		"commands[0].box_id":  `{"commands":[{"args":["/bin/true"],"box_id":3}]}`,
	} {
		out, err := post(body)
		if err != nil || !strings.Contains(out, `"field":"`+field+`"`) {
			t.Errorf("%s as nobody: %v %s", field, err, out)
		}
	}
}

// An interactive task: an interactor plays guess-the-number with a
// solution through two pipes, both recorded.
func TestInteractivePipes(t *testing.T) {
	s := startService(t, nil)
	interactor := `secret=37; n=0
while read g; do
  n=$((n+1))
  if [ "$g" -lt $secret ]; then echo higher
  elif [ "$g" -gt $secret ]; then echo lower
  else echo correct; echo "solved in $n" >&2; exit 0; fi
done
echo "no answer" >&2; exit 1`
	solution := `lo=1; hi=100
while :; do
  mid=$(( (lo+hi)/2 )); echo $mid
  read r
  case $r in higher) lo=$((mid+1));; lower) hi=$((mid-1));; correct) exit 0;; esac
done`
	req := map[string]any{
		"commands": []any{
			map[string]any{"args": []string{"/bin/sh", "-c", interactor}},
			map[string]any{"args": []string{"/bin/sh", "-c", solution}, "stdin": map[string]any{"pipe": true}},
		},
		"pipes": []any{
			map[string]any{"from": map[string]int{"cmd": 1, "fd": 1}, "to": map[string]int{"cmd": 0, "fd": 0}, "record_max_bytes": 1000},
			map[string]any{"from": map[string]int{"cmd": 0, "fd": 1}, "to": map[string]int{"cmd": 1, "fd": 0}, "record_max_bytes": 1000},
		},
	}
	resp := s.run(t, mustJSON(req))
	for i, r := range resp.Results {
		if r.Status != "OK" {
			t.Fatalf("command %d: %s %q %q", i, r.Status, r.Message, r.Stderr)
		}
	}
	if resp.Results[0].Stderr != "solved in 3\n" {
		t.Errorf("interactor: %q", resp.Results[0].Stderr)
	}
	if len(resp.Pipes) != 2 {
		t.Fatalf("pipes: %+v", resp.Pipes)
	}
	// A binary search over 1..100 for 37: 50, 25, then (26+49)/2.
	if got, want := resp.Pipes[0].Data, "50\n25\n37\n"; got != want {
		t.Errorf("guesses %q, want %q", got, want)
	}
	if got, want := resp.Pipes[1].Data, "lower\nhigher\ncorrect\n"; got != want {
		t.Errorf("answers %q, want %q", got, want)
	}
	// Piped streams are not collected.
	if resp.Results[1].Stdout != "" || resp.Results[0].Stdout != "" {
		t.Errorf("piped stdout collected: %q %q", resp.Results[0].Stdout, resp.Results[1].Stdout)
	}
}

// A pipe without recording is a direct pipe: the reader sees end of file
// when the writer ends.
func TestPipeEndOfFile(t *testing.T) {
	s := startService(t, nil)
	resp := s.run(t, `{"commands":[{"args":["/bin/sh","-c","seq 1 20000"]},{"args":["/usr/bin/wc","-l"]}],
		"pipes":[{"from":{"cmd":0,"fd":1},"to":{"cmd":1,"fd":0}}]}`)
	if r := resp.Results[1]; r.Status != "OK" || strings.TrimSpace(r.Stdout) != "20000" {
		t.Fatalf("reader: %s %q %q", r.Status, r.Stdout, r.Message)
	}
}

func TestStreamOrder(t *testing.T) {
	s := startService(t, nil)
	req, _ := http.NewRequest("POST", "http://isolate/v1/run", strings.NewReader(
		`{"commands":[{"args":["/bin/sh","-c","echo one; sleep 0.1; echo two >&2; sleep 0.1; echo three"]}]}`))
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != ndjson {
		t.Fatalf("content type %q", ct)
	}
	var kinds []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%v: %s", err, sc.Bytes())
		}
		switch {
		case ev.Stream != "":
			kinds = append(kinds, ev.Stream+":"+strings.TrimSpace(ev.Data))
		case ev.Result != nil:
			kinds = append(kinds, "result:"+string(ev.Result.Status))
		case ev.Done:
			kinds = append(kinds, "done")
		default:
			t.Fatalf("unexpected event %s", sc.Bytes())
		}
	}
	if got, want := strings.Join(kinds, " "), "stdout:one stderr:two stdout:three result:OK done"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
}

func TestFileStoreEndpoints(t *testing.T) {
	s := startService(t, nil) // quota 1 MiB
	code, b := s.do(t, "POST", "/v1/files", strings.Repeat("x", 600<<10))
	if code != http.StatusCreated {
		t.Fatalf("upload: %d %s", code, b)
	}
	var info struct {
		ID   string
		Size int64
	}
	json.Unmarshal(b, &info)
	if info.Size != 600<<10 {
		t.Fatalf("info %s", b)
	}
	if code, b := s.do(t, "POST", "/v1/files", strings.Repeat("y", 600<<10)); code != http.StatusInsufficientStorage {
		t.Fatalf("beyond the quota: %d %s", code, b)
	}
	if code, _ := s.do(t, "POST", "/v1/files?max_bytes=3", "1234"); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("beyond max_bytes: %d", code)
	}
	_, metrics := s.do(t, "GET", "/metrics", "")
	if !strings.Contains(string(metrics), fmt.Sprintf("isolate_filestore_bytes %d", 600<<10)) {
		t.Errorf("metrics lack the store's usage:\n%s", grep(string(metrics), "filestore"))
	}
	if code, b := s.do(t, "GET", "/v1/files/"+info.ID, ""); code != 200 || len(b) != 600<<10 {
		t.Fatalf("download: %d, %d bytes", code, len(b))
	}
	if code, _ := s.do(t, "DELETE", "/v1/files/"+info.ID, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	for _, m := range []string{"GET", "DELETE"} {
		if code, _ := s.do(t, m, "/v1/files/"+info.ID, ""); code != http.StatusNotFound {
			t.Fatalf("%s after delete: %d", m, code)
		}
	}
	if code, _ := s.do(t, "GET", "/v1/files/..%2f..%2fetc%2fpasswd", ""); code != http.StatusNotFound {
		t.Fatalf("path as id: %d", code)
	}
}

func grep(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestHealthVersionMetrics(t *testing.T) {
	s := startService(t, nil)
	code, b := s.do(t, "GET", "/v1/health", "")
	var h Health
	if json.Unmarshal(b, &h); code != 200 || !h.Ready {
		t.Fatalf("health: %d %s", code, b)
	}
	code, b = s.do(t, "GET", "/v1/version", "")
	if code != 200 || !strings.Contains(string(b), `"version":"test"`) {
		t.Fatalf("version: %d %s", code, b)
	}
	s.run(t, `{"commands":[{"args":["/bin/true"]}]}`)
	s.do(t, "POST", "/v1/run", `{}`)
	_, b = s.do(t, "GET", "/metrics", "")
	for _, want := range []string{
		`isolate_requests_total{code="200",endpoint="run"} 1`,
		`isolate_requests_total{code="400",endpoint="run"} 1`,
		`isolate_request_duration_seconds_count{endpoint="run"} 2`,
		"isolate_queue_length 0", "isolate_running_commands 0", "isolate_pool_ready_boxes",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestQueueFull(t *testing.T) {
	s := startService(t, func(c *Config) { c.Parallel, c.Queue = 1, 1 })
	var wg sync.WaitGroup
	// One runs (a long sleep, ended by cancelling its request), one waits.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://isolate/v1/run",
				strings.NewReader(`{"commands":[{"args":["/bin/sleep","30"]}]}`))
			if resp, err := s.client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	fdtest.WaitFor(t, "one running, one waiting", func() bool { r, w := s.queue.lengths(); return r == 1 && w == 1 })
	code, b := s.do(t, "POST", "/v1/run", `{"commands":[{"args":["/bin/true"]}]}`)
	if code != http.StatusTooManyRequests {
		t.Fatalf("beyond the queue: %d %s", code, b)
	}
	cancel()
	wg.Wait()
	fdtest.WaitFor(t, "the queue empties", func() bool { r, w := s.queue.lengths(); return r == 0 && w == 0 })
}

func TestCancelOnDisconnect(t *testing.T) {
	s := startService(t, nil)
	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://isolate/v1/run",
			strings.NewReader(mustJSON(map[string]any{"commands": []any{map[string]any{"args": []string{"/bin/sh", "-c", "sleep 30; : " + marker}}}})))
		if resp, err := s.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	fdtest.WaitFor(t, "the box runs", func() bool { return processWith(marker) })
	cancel()
	<-done
	fdtest.WaitFor(t, "the box is gone", func() bool { return !processWith(marker) && s.running() == 0 })
}

func TestDrain(t *testing.T) {
	s := startService(t, nil)
	result := make(chan *RunResponse, 1)
	go func() { result <- s.run(t, `{"commands":[{"args":["/bin/sh","-c","sleep 0.3; echo finished"]}]}`) }()
	fdtest.WaitFor(t, "the request runs", func() bool { return s.running() == 1 })
	shut := make(chan struct{})
	go func() { s.Shutdown(time.Minute); close(shut) }()
	fdtest.WaitFor(t, "draining", func() bool { return s.draining.Load() })
	code, b := s.do(t, "POST", "/v1/run", `{"commands":[{"args":["/bin/true"]}]}`)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("while draining: %d %s", code, b)
	}
	resp := <-result
	if r := resp.Results[0]; r.Status != "OK" || r.Stdout != "finished\n" {
		t.Fatalf("the running request: %+v", r.Report)
	}
	<-shut
}

// A request still waiting for a slot when the drain begins gets 503
// with Retry-After at once, while the one running goes on.
func TestDrainAnswersWaitingRequests(t *testing.T) {
	s := startService(t, func(c *Config) { c.Parallel, c.Queue = 1, 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://isolate/v1/run",
			strings.NewReader(`{"commands":[{"args":["/bin/sleep","30"]}]}`))
		if resp, err := s.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	fdtest.WaitFor(t, "one runs", func() bool { r, _ := s.queue.lengths(); return r == 1 })
	type answer struct {
		code  int
		retry string
		body  string
	}
	waited := make(chan answer, 1)
	go func() {
		resp, err := s.client.Post("http://isolate/v1/run", "application/json", strings.NewReader(`{"commands":[{"args":["/bin/true"]}]}`))
		if err != nil {
			waited <- answer{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		waited <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
	}()
	fdtest.WaitFor(t, "one waits", func() bool { _, w := s.queue.lengths(); return w == 1 })
	shut := make(chan struct{})
	go func() { s.Shutdown(time.Hour); close(shut) }()
	a := <-waited
	if a.code != http.StatusServiceUnavailable || a.retry == "" || !strings.Contains(a.body, "stopping") {
		t.Errorf("the waiting request at the drain: %d Retry-After %q %s", a.code, a.retry, a.body)
	}
	// The drain's grace (an hour) has not ended: the running one still runs.
	if r, _ := s.queue.lengths(); r != 1 {
		t.Errorf("the running request was cut short: %d running", r)
	}
	cancel()
	<-ran
	<-shut
}

// Drain with a grace period too short: what still runs is killed.
func TestDrainGraceKills(t *testing.T) {
	s := startService(t, nil)
	result := make(chan *RunResponse, 1)
	go func() { result <- s.run(t, `{"commands":[{"args":["/bin/sleep","30"]}]}`) }()
	fdtest.WaitFor(t, "the request runs", func() bool { return s.running() == 1 })
	s.Shutdown(50 * time.Millisecond)
	select {
	case resp := <-result:
		if r := resp.Results[0]; r.Status == "OK" {
			t.Fatalf("not killed: %+v", r.Report)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the request outlived the service")
	}
}

func TestExec(t *testing.T) {
	s := startService(t, nil)
	for _, tc := range []struct {
		name, body, status, stdout string
	}{
		{"runs", `{"lang":"python","source":"import sys\nprint(input()[::-1], sys.argv[1:])","stdin":{"text":"abc\n"},"args":["x"]}`, "OK", "cba ['x']\n"},
		{"syntax error", `{"lang":"python","source":"print(("}`, "CE", ""},
		{"compile error", `{"lang":"c","source":"int main( {"}`, "CE", ""},
		{"compiles and runs", `{"lang":"c","source":"#include <stdio.h>\nint main(){puts(\"hi\");return 3;}"}`, "RE", "hi\n"},
	} {
		code, b := s.do(t, "POST", "/v1/exec", tc.body)
		type phase struct {
			Stdout  string
			Sandbox struct{ Via string }
		}
		var rep struct {
			Status       string
			Compile, Run *phase
		}
		if err := json.Unmarshal(b, &rep); err != nil || code != 200 {
			t.Errorf("%s: %d %s", tc.name, code, b)
			continue
		}
		if rep.Status != tc.status || (tc.stdout != "" && (rep.Run == nil || rep.Run.Stdout != tc.stdout)) {
			t.Errorf("%s: %s", tc.name, b)
		}
		for _, p := range []*phase{rep.Compile, rep.Run} {
			if p != nil && p.Sandbox.Via != "service" {
				t.Errorf("%s: sandbox.via %q, want service", tc.name, p.Sandbox.Via)
			}
		}
	}
	for field, body := range map[string]string{
		"lang":   `{"source":"x"}`,
		"source": `{"lang":"python"}`,
		"srce":   `{"lang":"python","srce":"x"}`,
	} {
		code, b := s.do(t, "POST", "/v1/exec", body)
		if code != 400 || !strings.Contains(string(b), `"field":"`+field+`"`) {
			t.Errorf("%s: %d %s", body, code, b)
		}
	}
	if code, b := s.do(t, "POST", "/v1/exec", `{"lang":"cobol","source":"x"}`); code != 400 {
		t.Errorf("unknown language: %d %s", code, b)
	}
}

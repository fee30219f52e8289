package main

// The service's own memory, measured on the service's process: what the
// worst shapes of request make it hold (VmHWM, its peak resident set).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/isolate-sandbox/isolate/internal/fdtest"
)

// service is a service process started for a test or a benchmark; it
// stops when the test ends.
type service struct{ *child }

func startService(tb testing.TB) *service {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: starts sandboxes")
	}
	c := startChild(tb, tb.TempDir(), "--cli-socket", "none", "--parallel", "2")
	tb.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGTERM)
		c.cmd.Wait()
	})
	return &service{c}
}

// post sends body (streamed answer when stream) and reads the answer
// through, keeping at most its first keep bytes.
func (s *service) post(tb testing.TB, body io.Reader, stream bool, keep int) (int, []byte) {
	tb.Helper()
	req, _ := http.NewRequest("POST", "http://isolate/v1/run", body)
	if stream {
		req.Header.Set("Accept", "application/x-ndjson")
	}
	resp, err := s.client().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var head bytes.Buffer
	io.Copy(&head, io.LimitReader(resp.Body, int64(keep)))
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, head.Bytes()
}

// peakRSS is the service's peak resident set, in bytes.
func (s *service) peakRSS(tb testing.TB) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	tb.Fatal("no VmHWM")
	return 0
}

// zeros is a request whose program writes n NUL bytes to stdout (six
// bytes each in JSON: "\u0000"), kept up to limit.
func zeros(n, limit int64) string {
	return fmt.Sprintf(`{"commands":[{"args":["/bin/sh","-c","head -c %d /dev/zero"],"output_limit_bytes":%d,"wall_time_ms":120000}]}`, n, limit)
}

// A program's huge output leaves the service's memory at the output
// limit, not at a multiple of it: the answer is written out in pieces.
func TestHugeOutputLeavesTheServiceSmall(t *testing.T) {
	s := startService(t)
	const limit = 16 << 20
	code, head := s.post(t, strings.NewReader(zeros(300<<20, limit)), false, 1<<30)
	var resp struct {
		Results []struct {
			Stdout          string `json:"stdout"`
			StdoutTruncated bool   `json:"stdout_truncated"`
		} `json:"results"`
	}
	if err := json.Unmarshal(head, &resp); code != 200 || err != nil || len(resp.Results) != 1 {
		t.Fatalf("%d %v: %.200s", code, err, head)
	}
	if r := resp.Results[0]; len(r.Stdout) != limit || !r.StdoutTruncated {
		t.Errorf("stdout of %d bytes, truncated %v: want %d, truncated", len(r.Stdout), r.StdoutTruncated, limit)
	}
	// Generous: the service's own memory, one kept stream, and slack.
	// Encoding the answer whole took 6x the stream twice over and more.
	if peak := s.peakRSS(t); peak > 160<<20 {
		t.Errorf("the service's peak resident set is %d MiB after one run with a %d MiB output limit", peak>>20, limit>>20)
	}
}

// BenchmarkServicePeakRSS sends the worst shapes of request, each to a
// service process of its own, and reports the service's peak resident
// set over that shape's requests (peak-MiB): it stays flat however much
// output the program writes and however the body is shaped. Run as root:
//
//	go test -tags $TAGS -run '^$' -bench ServicePeakRSS -benchtime 3x ./cmd/isolate-serve
func BenchmarkServicePeakRSS(b *testing.B) {
	envs := func(size int) string { // a body of about size bytes, just under the limit
		n := size / 8
		return `{"commands":[{"args":["/bin/true"],"env":[` + strings.TrimSuffix(strings.Repeat(`"X=xxx",`, min(n, 1000)), ",") +
			`],"copy_in":[{"path":"/box/f","text":"` + strings.Repeat("y", size-9000) + `"}]}]}`
	}
	items := func(size int) string { // an array of empty objects of about size bytes
		return `{"commands":[{"args":["/bin/true"],"copy_in":[` + strings.TrimSuffix(strings.Repeat(`{},`, size/3), ",") + `]}]}`
	}
	shapes := []struct {
		name   string
		body   string
		stream bool
		want   int
	}{
		{"output=16MiB", zeros(16<<20, 16<<20), false, 200},
		{"output=1GiB", zeros(1<<30, 16<<20), false, 200},
		{"output=256MiB/stream", zeros(256<<20, 16<<20), true, 200},
		{"body=4MiB", envs(4<<20 - 4096), false, 200},
		{"body=64MiB", envs(64 << 20), false, 413},
		{"items=4MiB", items(4<<20 - 4096), false, 400},
	}
	b.Run("session-background=64x16MiB", func(b *testing.B) {
		s := startService(b)
		for range b.N {
			s.backgroundOutput(b, 64, 16<<20)
		}
		b.ReportMetric(float64(s.peakRSS(b))/(1<<20), "peak-MiB")
	})
	// A handed-over run's --json (with ISOLATE_BIN, whose runs the
	// service takes): its two kept streams of 16 MiB, six bytes of JSON
	// each.
	if bin := os.Getenv("ISOLATE_BIN"); bin != "" {
		b.Run("handover-json=2x16MiB", func(b *testing.B) {
			dir := b.TempDir()
			cli := filepath.Join(dir, "cli.sock")
			c := startChild(b, dir, "--cli-socket", cli, "--cli-binary", bin, "--parallel", "2")
			b.Cleanup(func() {
				c.cmd.Process.Signal(syscall.SIGTERM)
				c.cmd.Wait()
			})
			for range b.N {
				cmd := exec.Command(bin, "run", "--json", "--output-limit", "16M",
					"--", "/bin/sh", "-c", "head -c 16777216 /dev/zero; head -c 16777216 /dev/zero >&2")
				cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "ISOLATE_SERVICE_SOCKET=" + cli}
				cmd.Stdout = io.Discard
				if err := cmd.Run(); err != nil {
					b.Fatalf("%v: %s", err, c.log)
				}
			}
			b.ReportMetric(float64((&service{c}).peakRSS(b))/(1<<20), "peak-MiB")
		})
	}
	// A code context's calls, one after the other, each printing its
	// output limit on stdout and on stderr.
	b.Run("code-output=64x2x16MiB", func(b *testing.B) {
		s := startService(b)
		for range b.N {
			s.codeOutput(b, 64, 16<<20)
		}
		b.ReportMetric(float64(s.peakRSS(b))/(1<<20), "peak-MiB")
	})
	// Queue jobs past --max-body (with redis-server): never read.
	if redisServer, err := exec.LookPath("redis-server"); err == nil {
		b.Run("queue-body=64MiB", func(b *testing.B) {
			dir := b.TempDir()
			rdb := startRedis(b, redisServer, dir)
			c := startChild(b, dir, "--cli-socket", "none", "--parallel", "2", "--queue-url", "unix://"+filepath.Join(dir, "redis.sock"))
			b.Cleanup(func() {
				c.cmd.Process.Signal(syscall.SIGTERM)
				c.cmd.Wait()
			})
			for i := range b.N {
				queueJobs(b, rdb, i, 64<<20)
			}
			b.ReportMetric(float64((&service{c}).peakRSS(b))/(1<<20), "peak-MiB")
		})
	}
	for _, shape := range shapes {
		b.Run(shape.name, func(b *testing.B) {
			s := startService(b)
			for range b.N {
				if code, head := s.post(b, strings.NewReader(shape.body), shape.stream, 300); code != shape.want {
					b.Fatalf("%d, want %d: %s", code, shape.want, head)
				}
			}
			b.ReportMetric(float64(s.peakRSS(b))/(1<<20), "peak-MiB")
		})
	}
}

// request sends method path with body as JSON and decodes the answer
// into v (nil: read through).
func (s *service) request(tb testing.TB, method, path, body string, v any) int {
	tb.Helper()
	req, _ := http.NewRequest(method, "http://isolate"+path, strings.NewReader(body))
	resp, err := s.client().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		json.NewDecoder(resp.Body).Decode(v)
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// session makes a session whose output limit is limit; the caller
// deletes it.
func (s *service) session(tb testing.TB, limit int64) string {
	tb.Helper()
	var sess struct{ ID string }
	if code := s.request(tb, "POST", "/v1/sessions", fmt.Sprintf(`{"output_limit_bytes": %d}`, limit), &sess); code != 201 {
		tb.Fatalf("session: %d", code)
	}
	return sess.ID
}

// backgroundOutput runs n background commands in a session, one after
// the other, each keeping limit bytes of output, and waits for each.
func (s *service) backgroundOutput(tb testing.TB, n int, limit int64) {
	tb.Helper()
	id := s.session(tb, limit)
	defer s.request(tb, "DELETE", "/v1/sessions/"+id, "", nil)
	cmds := "/v1/sessions/" + id + "/commands"
	for i := range n {
		var p struct{ ID int }
		body := fmt.Sprintf(`{"args": ["/bin/sh", "-c", "head -c %d /dev/zero"], "background": true}`, limit)
		if code := s.request(tb, "POST", cmds, body, &p); code != 201 {
			tb.Fatalf("background command %d: %d", i, code)
		}
		var w struct {
			Running bool
			Stdout  string
		}
		if code := s.request(tb, "POST", fmt.Sprintf("%s/%d/wait", cmds, p.ID), "", &w); code != 200 || w.Running || int64(len(w.Stdout)) != limit {
			tb.Fatalf("background command %d: %d, running %v, %d bytes of stdout", i, code, w.Running, len(w.Stdout))
		}
	}
}

// A session's background commands keep their output within their
// caller's budget (--max-held-bytes-per-caller, 64 MiB by default), not
// each at its output limit until the session ends: the oldest ended
// ones' records go first.
func TestSessionBackgroundOutputLeavesTheServiceSmall(t *testing.T) {
	s := startService(t)
	s.backgroundOutput(t, 24, 16<<20)
	// The service, the budget, the garbage collector's slack (164 MiB
	// measured). Each command's kept output stayed in memory until the
	// session ended: 520 MiB.
	if peak := s.peakRSS(t); peak > 240<<20 {
		t.Errorf("the service's peak resident set is %d MiB after 24 background commands keeping 16 MiB each", peak>>20)
	}
}

// codeOutput makes n code calls in a session, one after the other, each
// writing limit bytes on stdout and on stderr, kept whole.
func (s *service) codeOutput(tb testing.TB, n int, limit int64) {
	tb.Helper()
	id := s.session(tb, limit)
	defer s.request(tb, "DELETE", "/v1/sessions/"+id, "", nil)
	body := fmt.Sprintf(`{"code": "import sys\nsys.stdout.write('x' * %d)\nsys.stderr.write('y' * %d)"}`, limit, limit)
	for i := range n {
		var a struct{ Stdout, Stderr string }
		if code := s.request(tb, "POST", "/v1/sessions/"+id+"/code", body, &a); code != 200 || int64(len(a.Stdout)) != limit || int64(len(a.Stderr)) != limit {
			tb.Fatalf("code call %d: %d, %d and %d bytes of output", i, code, len(a.Stdout), len(a.Stderr))
		}
	}
}

// startRedis starts redis-server on dir/redis.sock, without persistence,
// and a client of it; both stop when the test ends.
func startRedis(tb testing.TB, bin, dir string) *redis.Client {
	tb.Helper()
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "600", "--dir", dir, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	tb.Cleanup(func() { rdb.Close() })
	fdtest.WaitFor(tb, "redis-server answers", func() bool { return rdb.Ping(context.Background()).Err() == nil })
	return rdb
}

// queueJobs adds a job whose body is size bytes and a small one after
// it, and waits for both to have results: the first a dead letter.
func queueJobs(tb testing.TB, rdb *redis.Client, round int, size int) {
	tb.Helper()
	ctx := context.Background()
	big, small := fmt.Sprintf("big-%d", round), fmt.Sprintf("small-%d", round)
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "isolate:jobs", Values: []string{"id", big, "body", `{"commands":[{"args":["/bin/true","` + strings.Repeat("x", size) + `"]}]}`}})
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "isolate:jobs", Values: []string{"id", small, "body", `{"commands":[{"args":["/bin/true"]}]}`}})
	fdtest.WaitFor(tb, "both jobs to have results", func() bool {
		return rdb.Exists(ctx, "isolate:result:"+big, "isolate:result:"+small).Val() == 2
	})
	if dead := rdb.HGet(ctx, "isolate:result:"+big, "dead_letter").Val(); !strings.Contains(dead, "--max-body") {
		tb.Fatalf("the big job's result: %q", dead)
	}
}

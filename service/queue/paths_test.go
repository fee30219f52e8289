package queue

// The ways a job ends besides an answer, each on real workers (the
// isolate-serve binary) and a real redis-server: a job that kills every
// worker that takes it, a service too busy to take a job, and the
// queue's gauges while a job waits.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// api is an HTTP client of worker w's own unix socket, as root; it
// keeps no connection open (the service limits a uid's connections).
func (g *rig) api(w *workerProc) *http.Client {
	sock := filepath.Join(g.dir, w.name+".sock")
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// metric is the value of the sample of w's /metrics named series (a
// metric's name, with its labels as the exposition writes them), or -1
// when there is none.
func (g *rig) metric(t *testing.T, w *workerProc, series string) float64 {
	t.Helper()
	resp, err := g.api(w).Get("http://isolate/metrics")
	if err != nil {
		return -1 // not listening yet
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == series {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("%s: %q", series, sc.Text())
			}
			return v
		}
	}
	return -1
}

// hold sends worker w's API a run of `sleep 60` and leaves it running:
// it holds a slot, or waits for one, until the connection closes (then
// its box is killed and its slot freed).
func (g *rig) hold(t *testing.T, w *workerProc) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", filepath.Join(g.dir, w.name+".sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	body := `{"commands":[{"args":["/bin/sh","-c","sleep 60; : ` + g.marker + `-hold"]}]}`
	fmt.Fprintf(conn, "POST /v1/run HTTP/1.1\r\nHost: isolate\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return conn
}

// stop drains w (SIGTERM) and waits for it.
func (w *workerProc) stop(t *testing.T) {
	t.Helper()
	w.cmd.Process.Signal(syscall.SIGTERM)
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("%s: SIGTERM: %v", w.name, err)
	}
}

// health is w's /v1/health: commands running, requests waiting.
func (g *rig) health(t *testing.T, w *workerProc) (running, waiting int) {
	t.Helper()
	resp, err := g.api(w).Get("http://isolate/v1/health")
	if err != nil {
		return -1, -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var h struct{ Running, Waiting int }
	if err := json.Unmarshal(b, &h); err != nil {
		return -1, -1
	}
	return h.Running, h.Waiting
}

// TestPoisonJob: a job whose worker dies every time it takes it (the
// test SIGKILLs the worker that holds it once its box runs) is claimed
// by the next worker each time, and its fourth delivery, with
// --queue-max-deliveries 3, is a dead letter that says so; it does not
// run a fourth time, and the other jobs are answered.
func TestPoisonJob(t *testing.T) {
	g := newRig(t)
	ctx := context.Background()
	startRedis(t, g.r)
	byName := map[string]*workerProc{}
	n := 0
	startOne := func() {
		w := g.start(t, fmt.Sprintf("p%d", n))
		byName[w.name] = w
		n++
	}
	startOne()
	startOne()
	poisonBox := g.marker + "-poison"
	msgID, err := g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", "poison",
		"body", `{"commands":[{"args":["/bin/sh","-c","sleep 60; : ` + poisonBox + `"]}]}`}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var others []string
	for i := range 6 {
		id := fmt.Sprintf("ok-%d", i)
		others = append(others, id)
		g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", id, "body", `{"commands":[{"args":["/bin/echo","hi"]}]}`}})
	}
	holder := func() (string, int64) {
		p, _ := g.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: g.keys.Jobs, Group: "isolate-workers", Start: msgID, End: msgID, Count: 1}).Result()
		if len(p) != 1 {
			return "", 0
		}
		return p[0].Consumer, p[0].RetryCount
	}
	var killed []string
	for delivery := int64(1); delivery <= 3; delivery++ {
		var name string
		waitFor(t, fmt.Sprintf("delivery %d of the poison job runs its box", delivery), func() bool {
			var count int64
			name, count = holder()
			return count == delivery && byName[name] != nil && byName[name].cmd.ProcessState == nil && processWith(poisonBox)
		})
		w := byName[name]
		if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		w.cmd.Wait()
		killed = append(killed, name)
		// Its box dies with it.
		waitFor(t, "the killed worker's box is gone", func() bool { return !processWith(poisonBox) })
		startOne()
	}

	waitFor(t, "the poison job is a dead letter", func() bool { return g.rdb.XLen(ctx, g.keys.Dead).Val() == 1 })
	dead := g.rdb.XRange(ctx, g.keys.Dead, "-", "+").Val()[0].Values
	if dead["id"] != "poison" || dead["deliveries"] != "4" || dead["message"] != msgID ||
		!strings.Contains(dead["reason"].(string), "delivered 4 times without a result (at most 3)") {
		t.Errorf("the dead letter: %v", dead)
	}
	for _, k := range killed {
		if dead["worker"] == k {
			t.Errorf("the dead letter was written by %s, which was killed", k)
		}
	}
	t.Logf("killed %v; the dead letter: %v", killed, dead)
	res := g.rdb.HGetAll(ctx, g.keys.Result("poison")).Val()
	if res["status"] != "" || res["dead_letter"] != dead["reason"] {
		t.Errorf("the poison job's result: %v", res)
	}
	if processWith(poisonBox) {
		t.Error("the poison job ran a fourth time")
	}
	waitFor(t, "the other jobs are answered", func() bool {
		return g.rdb.Exists(ctx, resultKeys(g.keys, others)...).Val() == int64(len(others))
	})
	for _, id := range others {
		if err := verdict("OK", 0)(g.rdb.HGet(ctx, g.keys.Result(id), "status").Val(), g.rdb.HGet(ctx, g.keys.Result(id), "body").Val()); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if p := g.rdb.XPending(ctx, g.keys.Jobs, "isolate-workers").Val(); p.Count != 0 || g.rdb.XLen(ctx, g.keys.Jobs).Val() != 0 {
		t.Errorf("left in the stream: %d pending, %d in all", p.Count, g.rdb.XLen(ctx, g.keys.Jobs).Val())
	}
	for _, w := range g.workers {
		if w.cmd.ProcessState == nil {
			w.stop(t)
		}
	}
	g.nothingLeft(t)
}

// TestBusyService: a job the service turns away because its slots and
// its waiting queue are full (429, the API's own callers hold them)
// waits in its worker and is asked again until the service takes it: it
// is answered once, by its first delivery, and is no dead letter.
func TestBusyService(t *testing.T) {
	g := newRig(t)
	ctx := context.Background()
	startRedis(t, g.r)
	w := g.start(t, "b0", "--parallel", "1", "--queue", "1")
	waitFor(t, "b0 answers", func() bool { r, _ := g.health(t, w); return r == 0 })
	first := g.hold(t, w)
	waitFor(t, "an API run holds the only slot", func() bool { r, _ := g.health(t, w); return r == 1 })
	second := g.hold(t, w)
	waitFor(t, "an API run waits for it", func() bool { _, q := g.health(t, w); return q == 1 })

	msgID := g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", "busy", "body", `{"commands":[{"args":["/bin/echo","hi"]}]}`}}).Val()
	// Turned away twice: asked, and asked again.
	waitFor(t, "the job is turned away twice", func() bool {
		return g.metric(t, w, `isolate_requests_total{code="429",endpoint="run"}`) >= 2
	})
	if n := g.rdb.Exists(ctx, g.keys.Result("busy")).Val(); n != 0 {
		t.Errorf("the job has a result while the service was full: %v", g.rdb.HGetAll(ctx, g.keys.Result("busy")).Val())
	}
	// Held by its worker, delivered once: being turned away is no
	// delivery more.
	p := g.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: g.keys.Jobs, Group: "isolate-workers", Start: msgID, End: msgID, Count: 1}).Val()
	if len(p) != 1 || p[0].Consumer != "b0" || p[0].RetryCount != 1 {
		t.Errorf("while turned away, the job's pending entry: %+v", p)
	}
	first.Close()
	second.Close()
	waitFor(t, "the job is answered", func() bool { return g.rdb.Exists(ctx, g.keys.Result("busy")).Val() == 1 })
	res := g.rdb.HGetAll(ctx, g.keys.Result("busy")).Val()
	if err := verdict("OK", 0)(res["status"], res["body"]); err != nil || res["dead_letter"] != "" {
		t.Errorf("the job's result: %v (%v)", res, err)
	}
	if n := g.rdb.XLen(ctx, g.keys.Dead).Val(); n != 0 {
		t.Errorf("%d dead letters", n)
	}
	if n := len(g.rdb.XRange(ctx, g.keys.Results, "-", "+").Val()); n != 1 {
		t.Errorf("%d announcements of one job", n)
	}
	if g.rdb.XLen(ctx, g.keys.Jobs).Val() != 0 {
		t.Errorf("the job %s is left in the stream", msgID)
	}
	for series, want := range map[string]float64{
		`isolate_queue_jobs_total{outcome="answered"}`:    1,
		`isolate_queue_jobs_total{outcome="handed_back"}`: 0,
		`isolate_queue_claims_total`:                      0,
	} {
		if got := g.metric(t, w, series); got != want {
			t.Errorf("%s: %v, want %v", series, got, want)
		}
	}
	w.stop(t)
	g.nothingLeft(t)
}

// TestQueueGauges: the lag is the age in seconds of the oldest job not
// finished (an id added an hour ago: its delivery waits for the
// service's only slot), the depth and the pending count are in jobs,
// and all are 0 once the jobs are done.
func TestQueueGauges(t *testing.T) {
	g := newRig(t)
	ctx := context.Background()
	startRedis(t, g.r)
	w := g.start(t, "g0", "--parallel", "1")
	waitFor(t, "g0 answers", func() bool { r, _ := g.health(t, w); return r == 0 })
	hold := g.hold(t, w)
	waitFor(t, "an API run holds the only slot", func() bool { r, _ := g.health(t, w); return r == 1 })

	now, err := g.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	hourAgo := fmt.Sprintf("%d-0", now.Add(-time.Hour).UnixMilli())
	job := []string{"body", `{"commands":[{"args":["/bin/echo","hi"]}]}`}
	if err := g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, ID: hourAgo, Values: append([]string{"id", "old"}, job...)}).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old job waits for the slot", func() bool { _, q := g.health(t, w); return q == 1 })
	g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: append([]string{"id", "new"}, job...)})
	var lag float64
	waitFor(t, "the gauges see both jobs", func() bool {
		lag = g.metric(t, w, "isolate_queue_lag_seconds")
		return lag >= 3600 && g.metric(t, w, "isolate_queue_depth_jobs") == 2 && g.metric(t, w, "isolate_queue_pending_jobs") == 1
	})
	if elapsed := time.Since(now).Seconds(); lag > 3600+elapsed+5 {
		t.Errorf("lag %.0f s: the old job is %.0f s old", lag, 3600+elapsed)
	}
	if got := g.metric(t, w, "isolate_queue_lag_jobs"); got != -1 {
		t.Errorf("isolate_queue_lag_jobs is still exported: %v", got)
	}
	hold.Close()
	waitFor(t, "both jobs are answered", func() bool { return g.rdb.Exists(ctx, g.keys.Result("old"), g.keys.Result("new")).Val() == 2 })
	waitFor(t, "the gauges are 0", func() bool {
		return g.metric(t, w, "isolate_queue_lag_seconds") == 0 && g.metric(t, w, "isolate_queue_depth_jobs") == 0 &&
			g.metric(t, w, "isolate_queue_pending_jobs") == 0
	})
	w.stop(t)
	g.nothingLeft(t)
}

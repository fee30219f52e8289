package queue

// Workers on nodes that differ, as a DaemonSet's do: one lacks an image
// another has, one cannot make boxes, Redis goes away for longer than a
// job may stay idle. A worker takes only what it can run (the rest goes
// to a worker that can, never counted as a failed attempt), an XX of its
// own machinery is never a job's answer, and no job runs twice.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// announced is worker name's announcement, if it has one.
func (g *rig) announced(name string) (announcement, bool) {
	var a announcement
	v, err := g.rdb.Get(context.Background(), "isolate:worker:"+name).Result()
	if err != nil || json.Unmarshal([]byte(v), &a) != nil {
		return a, false
	}
	return a, true
}

// waitResults waits for a result of each id.
func (g *rig) waitResults(t *testing.T, ids []string) {
	t.Helper()
	waitProgress(t, "every job has a result", func() (int64, bool) {
		n, err := g.rdb.Exists(context.Background(), resultKeys(g.keys, ids)...).Result()
		return n, err == nil && n == int64(len(ids))
	})
}

// get is w's answer to GET path.
func (g *rig) get(t *testing.T, w *workerProc, path string) (int, string) {
	t.Helper()
	resp, err := g.api(w).Get("http://isolate" + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// deadLetters are the dead letters' reasons by job id.
func (g *rig) deadLetters() map[string]string {
	dead := map[string]string{}
	for _, m := range g.rdb.XRange(context.Background(), g.keys.Dead, "-", "+").Val() {
		dead[m.Values["id"].(string)] = m.Values["reason"].(string)
	}
	return dead
}

// A worker without the python image leaves python jobs to the worker
// that has it; a job whose image no worker has ends in the dead letters,
// saying so.
func TestWorkerWithoutAnImage(t *testing.T) {
	g := newRig(t)
	if _, err := rootfs.LookupImage("python"); err != nil {
		t.Skip("the python image is not built (scripts/images.sh)")
	}
	ctx := context.Background()
	startRedis(t, g.r)
	// A language whose image no worker has, known to both.
	defs := filepath.Join(g.dir, "langs")
	os.Mkdir(defs, 0o755)
	os.WriteFile(filepath.Join(defs, "ghost.json"), []byte(`{"name":"ghost","title":"Ghost","packages":["ghost"],"version":["true"],"source":"main.gh","run":["/bin/true"]}`), 0o644)
	noImages := filepath.Join(g.dir, "no-images")
	os.Mkdir(noImages, 0o755)
	has := g.startEnv(t, "has", []string{"ISOLATE_LANGS_DIR=" + defs})
	lacks := g.startEnv(t, "lacks", []string{"ISOLATE_LANGS_DIR=" + defs, "ISOLATE_IMAGES_DIR=" + noImages})
	waitFor(t, "both workers announce themselves ready", func() bool {
		a, ok1 := g.announced("has")
		b, ok2 := g.announced("lacks")
		return ok1 && ok2 && a.Ready && b.Ready
	})
	if a, _ := g.announced("lacks"); a.Images == nil || len(*a.Images) != 0 {
		t.Fatalf("the worker without images announces %+v", a)
	}

	var ids []string
	pipe := g.rdb.Pipeline()
	for i := range 16 {
		id := fmt.Sprintf("py-%d", i)
		ids = append(ids, id)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", id, "endpoint", "exec",
			"body", fmt.Sprintf(`{"lang":"python","source":"print(6*%d)"}`, i)}})
		if i%4 == 0 {
			id := fmt.Sprintf("host-%d", i)
			ids = append(ids, id)
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", id, "body", `{"commands":[{"args":["/bin/echo","hi"]}]}`}})
		}
	}
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", "ghost", "endpoint", "exec",
		"body", `{"lang":"ghost","source":"boo"}`}})
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	g.waitResults(t, append(ids, "ghost"))

	handedBack := g.metric(t, lacks, `isolate_queue_jobs_total{outcome="handed_back"}`)
	if handedBack < 1 {
		t.Errorf("the worker without the python image handed back %v jobs, want some", handedBack)
	}
	for i := range 16 {
		id := fmt.Sprintf("py-%d", i)
		res := g.rdb.HGetAll(ctx, g.keys.Result(id)).Val()
		var r struct {
			Status string
			Run    struct{ Stdout string }
		}
		if res["status"] != "200" || json.Unmarshal([]byte(res["body"]), &r) != nil || r.Status != "OK" || r.Run.Stdout != fmt.Sprintf("%d\n", 6*i) || res["worker"] != "has" {
			t.Errorf("job %s: %v", id, res)
		}
	}
	dead := g.deadLetters()
	if len(dead) != 1 || !strings.Contains(dead["ghost"], "no live worker can run it: image ghost is built on none of has, lacks") {
		t.Errorf("dead letters %v, want the ghost job's alone, saying no worker has its image", dead)
	}
	if n := g.rdb.XLen(ctx, g.keys.Jobs).Val(); n != 0 {
		t.Errorf("%d jobs left in the stream", n)
	}
	has.stop(t)
	lacks.stop(t)
	g.nothingLeft(t)
}

// A worker that cannot make boxes reads no job; one whose host breaks
// under it hands back the job that ended XX through no fault of its own,
// and reads no more: every job is answered by the worker that works, and
// none with XX.
func TestBrokenWorker(t *testing.T) {
	g := newRig(t)
	if cgroup.DetectMode() == cgroup.V2 {
		t.Skip("a worker's own cgroup root on v2 needs its controllers delegated")
	}
	ctx := context.Background()
	startRedis(t, g.r)
	// broken's cgroup root does not exist; breaks's is removed once it is
	// ready.
	own := func(name string) (string, func()) {
		root := g.cgroupRoot + "-" + name
		mgr, err := cgroup.NewManager(root)
		if err != nil {
			t.Fatal(err)
		}
		remove := func() {
			for _, p := range mgr.Parents() {
				os.Remove(p)
				os.Remove(filepath.Dir(p))
			}
		}
		for _, p := range mgr.Parents() {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(remove)
		return root, remove
	}
	breaksRoot, breakIt := own("breaks")
	works := g.start(t, "works")
	broken := g.startEnv(t, "broken", []string{"ISOLATE_CGROUP_ROOT=" + g.cgroupRoot + "-no-such-root"}, "--pool", "0")
	breaks := g.startEnv(t, "breaks", []string{"ISOLATE_CGROUP_ROOT=" + breaksRoot}, "--pool", "0")
	waitFor(t, "the workers announce themselves", func() bool {
		a, ok1 := g.announced("works")
		_, ok2 := g.announced("broken")
		c, ok3 := g.announced("breaks")
		return ok1 && ok2 && ok3 && a.Ready && c.Ready
	})
	if a, _ := g.announced("broken"); a.Ready {
		t.Fatalf("the worker that cannot make boxes announces itself ready")
	}
	breakIt()

	var ids []string
	pipe := g.rdb.Pipeline()
	for i := range 12 {
		id := fmt.Sprintf("job-%d", i)
		ids = append(ids, id)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", id, "body", `{"commands":[{"args":["/bin/sh","-c","echo ran; : ` + g.marker + `"]}]}`}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	g.waitResults(t, ids)
	for _, id := range ids {
		res := g.rdb.HGetAll(ctx, g.keys.Result(id)).Val()
		if err := verdict("OK", 0)(res["status"], res["body"]); err != nil || res["worker"] != "works" {
			t.Errorf("job %s: %v %v", id, res, err)
		}
	}
	if n := g.metric(t, broken, `isolate_queue_jobs_total{outcome="handed_back"}`); n != 0 {
		t.Errorf("the worker that never made a box handed back %v jobs: it read some", n)
	}
	if n := g.metric(t, breaks, `isolate_queue_jobs_total{outcome="handed_back"}`); n < 1 {
		t.Errorf("the worker whose host broke handed back %v jobs", n)
	}
	if dead := g.deadLetters(); len(dead) != 0 {
		t.Errorf("dead letters %v", dead)
	}
	for _, w := range []*workerProc{broken, breaks} {
		code, body := g.get(t, w, "/v1/health")
		if code != 503 || !strings.Contains(body, "self-test: XX") {
			t.Errorf("%s's health: %d %s", w.name, code, body)
		}
	}
	works.stop(t)
	broken.stop(t)
	breaks.stop(t)
	g.nothingLeft(t)
}

// Redis goes away for twice --queue-claim-idle while two live workers
// run jobs: when it is back, each renews its own before it claims
// anything, and neither takes the other's: no job runs twice. A job held
// by a worker whose announcement lives (here a consumer the test
// announces) is never claimed, however idle; one held by a worker with
// no announcement (dead) is claimed and answered.
func TestOutageClaimsNoLiveWorkersJobs(t *testing.T) {
	g := newRig(t)
	ctx := context.Background()
	startRedis(t, g.r)
	const claimIdle = 2 * time.Second
	if err := g.rdb.XGroupCreateMkStream(ctx, g.keys.Jobs, "isolate-workers", "0").Err(); err != nil {
		t.Fatal(err)
	}
	deliver := func(id, consumer string) string {
		msg := g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", id, "body", `{"commands":[{"args":["/bin/echo","` + id + `"]}]}`}}).Val()
		g.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "isolate-workers", Consumer: consumer, Streams: []string{g.keys.Jobs, ">"}, Count: 1})
		return msg
	}
	// (An announcement that outlives the test: the key's expiry is
	// absolute, so the outage does not end it.)
	g.rdb.Set(ctx, "isolate:worker:elsewhere", `{"name":"elsewhere","ready":true}`, time.Hour)
	t.Cleanup(func() { g.rdb.Del(context.Background(), "isolate:worker:elsewhere") })
	liveMsg := deliver("held-by-live", "elsewhere")
	deliver("held-by-dead", "gone")

	a := g.start(t, "a", "--queue-claim-idle", claimIdle.String())
	b := g.start(t, "b", "--queue-claim-idle", claimIdle.String())
	waitFor(t, "both workers announce themselves ready", func() bool {
		x, ok1 := g.announced("a")
		y, ok2 := g.announced("b")
		return ok1 && ok2 && x.Ready && y.Ready
	})
	g.waitResults(t, []string{"held-by-dead"})

	// Each takes two jobs (its --parallel) that outlast the outage.
	var ids []string
	pipe := g.rdb.Pipeline()
	for i := range 4 {
		id := fmt.Sprintf("long-%d", i)
		ids = append(ids, id)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", id, "body", `{"commands":[{"args":["/bin/sh","-c","sleep 8; echo done; : ` + g.marker + `"]}]}`}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	holder := map[string]string{}
	waitFor(t, "each worker holds two jobs", func() bool {
		p, err := g.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: g.keys.Jobs, Group: "isolate-workers", Start: "-", End: "+", Count: 10}).Result()
		if err != nil {
			return false
		}
		per := map[string]int{}
		for _, e := range p {
			per[e.Consumer]++
			m := g.rdb.XRange(ctx, g.keys.Jobs, e.ID, e.ID).Val()
			if len(m) == 1 {
				holder[m[0].Values["id"].(string)] = e.Consumer
			}
		}
		return per["a"] == 2 && per["b"] == 2 && per["elsewhere"] == 1
	})
	g.r.stop()
	time.Sleep(2 * claimIdle)
	startRedis(t, g.r)
	g.waitResults(t, ids)
	for _, id := range ids {
		res := g.rdb.HGetAll(ctx, g.keys.Result(id)).Val()
		if err := verdict("OK", 0)(res["status"], res["body"]); err != nil || res["worker"] != holder[id] {
			t.Errorf("job %s (held by %s): %v %v", id, holder[id], res, err)
		}
	}
	// The live consumer's job is still its own, unrun.
	if p := g.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: g.keys.Jobs, Group: "isolate-workers", Start: liveMsg, End: liveMsg, Count: 1}).Val(); len(p) != 1 || p[0].Consumer != "elsewhere" {
		t.Errorf("the job a live worker holds: %+v", p)
	}
	if n := g.rdb.Exists(ctx, g.keys.Result("held-by-live")).Val(); n != 0 {
		t.Errorf("the job a live worker holds was run by another")
	}
	claims := 0.0
	for _, w := range []*workerProc{a, b} {
		claims += g.metric(t, w, `isolate_queue_claims_total`)
		if n := g.metric(t, w, `isolate_queue_jobs_total{outcome="duplicate"}`); n != 0 {
			t.Errorf("%s: %v duplicates", w.name, n)
		}
	}
	if claims != 1 {
		t.Errorf("the workers claimed %v jobs, want 1 (the dead worker's)", claims)
	}
	g.rdb.XAck(ctx, g.keys.Jobs, "isolate-workers", liveMsg)
	g.rdb.XDel(ctx, g.keys.Jobs, liveMsg)
	a.stop(t)
	b.stop(t)
	g.nothingLeft(t)
}

// A worker drained by `isolate-serve drain` (a pod's preStop) finishes the
// job it holds, takes no more, and is gone from the workers; a job added
// then is another worker's.
func TestDrainedWorker(t *testing.T) {
	g := newRig(t)
	ctx := context.Background()
	startRedis(t, g.r)
	d := g.start(t, "d")
	waitFor(t, "the worker announces itself ready", func() bool { a, ok := g.announced("d"); return ok && a.Ready })
	g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", "held", "body", `{"commands":[{"args":["/bin/sh","-c","sleep 2; echo held; : ` + g.marker + `"]}]}`}})
	waitFor(t, "the worker runs the job", func() bool { return processWith(g.marker) })
	drain := exec.Command(g.serve, "drain", "--socket", filepath.Join(g.dir, "d.sock"))
	if out, err := drain.CombinedOutput(); err != nil {
		t.Fatalf("drain: %v %s", err, out)
	}
	res := g.rdb.HGetAll(ctx, g.keys.Result("held")).Val()
	if err := verdict("OK", 0)(res["status"], res["body"]); err != nil || res["worker"] != "d" {
		t.Errorf("the job held at the drain: %v %v", res, err)
	}
	waitFor(t, "the drained worker's announcement is gone", func() bool { _, ok := g.announced("d"); return !ok })
	g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", "after", "body", `{"commands":[{"args":["/bin/echo","after"]}]}`}})
	e := g.start(t, "e")
	g.waitResults(t, []string{"after"})
	if w := g.rdb.HGet(ctx, g.keys.Result("after"), "worker").Val(); w != "e" {
		t.Errorf("the job added after the drain was answered by %s", w)
	}
	if n := g.metric(t, d, `isolate_queue_jobs_total{outcome="answered"}`); n != 1 {
		t.Errorf("the drained worker answered %v jobs, want the one it held", n)
	}
	d.stop(t)
	e.stop(t)
	g.nothingLeft(t)
}

package queue

// Workers as separate processes of the real isolate-serve binary, on a
// real redis-server (Debian's) the test starts on a private unix socket
// with persistence on: a mix of jobs, Redis unreachable at the start and
// restarted mid-run, one worker SIGKILLed mid-job, a poison job and a bad
// one. Every job ends with exactly one result (and the bad and poison
// ones with exactly one dead letter), and nothing is left behind.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/internal/cgtest"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

func TestMain(m *testing.M) {
	boxinit.MaybeInit()
	os.Exit(m.Run())
}

// redisServer is the test's Redis: its directory keeps the append-only
// file across restarts.
type redisServer struct {
	dir, sock string
	cmd       *exec.Cmd
}

func startRedis(t *testing.T, r *redisServer) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed (scripts/test.sh installs Debian's redis-server)")
	}
	r.cmd = exec.Command(bin, "--port", "0", "--unixsocket", r.sock, "--unixsocketperm", "600",
		"--dir", r.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no")
	log, _ := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	r.cmd.Stdout, r.cmd.Stderr = log, log
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: r.sock})
	defer c.Close()
	waitFor(t, "redis-server answers", func() bool { return c.Ping(context.Background()).Err() == nil })
}

// stop shuts Redis down as an operator would (SIGTERM: it syncs the
// append-only file) and waits for it.
func (r *redisServer) stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Signal(syscall.SIGTERM)
		r.cmd.Wait()
		r.cmd = nil
	}
}

// workerProc is one isolate-serve with --queue-url.
type workerProc struct {
	name string
	cmd  *exec.Cmd
	log  *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startWorker starts worker name; flags given after the defaults
// replace them (the last of a flag given twice counts).
func startWorker(t *testing.T, serve, dir, redisSock, cgroupRoot, name string, env []string, flags ...string) *workerProc {
	t.Helper()
	w := &workerProc{name: name, log: &lockedBuffer{}}
	w.cmd = exec.Command(serve, append([]string{"--socket", filepath.Join(dir, name+".sock"), "--cli-socket", "none",
		"--store", filepath.Join(dir, name+"-store"), "--parallel", "2", "--pool", "1", "--grace", "30s",
		"--queue-url", "unix://" + redisSock, "--queue-name", name, "--queue-claim-idle", "2s"}, flags...)...)
	// (env after the defaults: the last of a variable given twice counts.)
	w.cmd.Env = append(append(os.Environ(), "ISOLATE_CGROUP_ROOT="+cgroupRoot), env...)
	w.cmd.Stderr = w.log
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return w
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitProgress waits for cond, however long it takes while its count
// keeps growing: a run of thousands of jobs has no deadline of its own,
// only one for standing still.
func waitProgress(t *testing.T, what string, cond func() (int64, bool)) {
	t.Helper()
	last, since := int64(-1), time.Now()
	for {
		n, done := cond()
		if done {
			return
		}
		if n > last {
			last, since = n, time.Now()
		} else if time.Since(since) > 30*time.Second {
			t.Fatalf("never happened: %s (stuck at %d for 30 s)", what, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// jobKind is one kind of job of the mix and what its result must say.
type jobKind struct {
	name, body string
	check      func(status string, body string) error
	endpoint   string // "": run
}

func verdict(want string, cmd int) func(string, string) error {
	return func(status, body string) error {
		var r struct {
			Results []struct {
				Status string `json:"status"`
				Stdout string `json:"stdout"`
			} `json:"results"`
		}
		if status != "200" || json.Unmarshal([]byte(body), &r) != nil || len(r.Results) <= cmd || r.Results[cmd].Status != want {
			return fmt.Errorf("want a 200 answer with %s, got %s %s", want, status, body)
		}
		return nil
	}
}

// rig is a test's Redis (not started), its workers, and the cgroup root
// their boxes go under.
type rig struct {
	serve, dir, marker, cgroupRoot string
	r                              *redisServer
	mgr                            *cgroup.Manager
	rdb                            *redis.Client
	keys                           Keys
	workers                        []*workerProc
}

// newRig makes a test's rig; its workers are drained (or killed, past
// 40 s) and its cgroups removed when the test ends.
func newRig(t *testing.T) *rig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the workers start sandboxes")
	}
	bin := os.Getenv("ISOLATE_BIN")
	if bin == "" {
		t.Skip("ISOLATE_BIN: the isolate binary, with isolate-serve beside it")
	}
	g := &rig{serve: filepath.Join(filepath.Dir(bin), "isolate-serve"), dir: t.TempDir(), keys: KeysOf("isolate")}
	os.Chmod(g.dir, 0o755)
	g.r = &redisServer{dir: g.dir, sock: filepath.Join(g.dir, "redis.sock")}
	t.Cleanup(g.r.stop)
	g.marker = fmt.Sprintf("queue-test-%d-%s", os.Getpid(), strings.ToLower(t.Name()))
	// Boxes in cgroups of the test's own, so that what is left is ours
	// and not another test binary's.
	g.cgroupRoot, g.mgr = cgtest.Root(t, "queue-test-"+strings.ToLower(t.Name()))
	g.rdb = redis.NewClient(&redis.Options{Network: "unix", Addr: g.r.sock, MaxRetries: -1})
	t.Cleanup(func() { g.rdb.Close() })
	t.Cleanup(func() {
		for _, w := range g.workers {
			if t.Failed() {
				t.Logf("%s:\n%s", w.name, w.log)
			}
			if w.cmd.ProcessState == nil {
				// Drained, so that its boxes are gone with it.
				w.cmd.Process.Signal(syscall.SIGTERM)
				stopped := make(chan struct{})
				go func() { w.cmd.Wait(); close(stopped) }()
				select {
				case <-stopped:
				case <-time.After(40 * time.Second):
					w.cmd.Process.Kill()
					<-stopped
				}
			}
		}
	})
	return g
}

// start starts worker name on the rig's Redis (flags: as startWorker's).
func (g *rig) start(t *testing.T, name string, flags ...string) *workerProc {
	t.Helper()
	return g.startEnv(t, name, nil, flags...)
}

// startEnv starts worker name with more environment variables.
func (g *rig) startEnv(t *testing.T, name string, env []string, flags ...string) *workerProc {
	t.Helper()
	w := startWorker(t, g.serve, g.dir, g.r.sock, g.cgroupRoot, name, env, flags...)
	g.workers = append(g.workers, w)
	return w
}

// nothingLeft checks, once every worker has stopped, that no box
// process and no box cgroup of the test is left.
func (g *rig) nothingLeft(t *testing.T) {
	t.Helper()
	if processWith(g.marker) {
		t.Error("a box process of the test is still running")
	}
	if boxes := g.mgr.Boxes(); len(boxes) > 0 {
		t.Errorf("box cgroups left: %v", boxes)
	}
}

func TestWorkers(t *testing.T) {
	g := newRig(t)
	jobs := 40
	if v := os.Getenv("ISOLATE_QUEUE_JOBS"); v != "" {
		jobs, _ = strconv.Atoi(v)
	}
	outage := 3 * time.Second
	if v := os.Getenv("ISOLATE_QUEUE_OUTAGE"); v != "" {
		outage, _ = time.ParseDuration(v)
	}
	r, marker, rdb, keys := g.r, g.marker, g.rdb, g.keys
	ctx := context.Background()

	// A poison job of a worker that went before any of these started:
	// delivered three times to a consumer that never answered
	// (TestPoisonJob kills the workers that take one).
	startRedis(t, r)
	if err := rdb.XGroupCreateMkStream(ctx, keys.Jobs, "isolate-workers", "0").Err(); err != nil {
		t.Fatal(err)
	}
	poisonID := rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Jobs, Values: []string{"id", "poison",
		"body", `{"commands":[{"args":["/bin/sh","-c","sleep 1; : ` + marker + `-poison"]}]}`}}).Val()
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "isolate-workers", Consumer: "ghost", Streams: []string{keys.Jobs, ">"}, Count: 1})
	for range 2 {
		rdb.XClaim(ctx, &redis.XClaimArgs{Stream: keys.Jobs, Group: "isolate-workers", Consumer: "ghost", Messages: []string{poisonID}})
	}
	r.stop()

	// Redis is unreachable when the workers start.
	workers := []*workerProc{}
	for i := range 3 {
		workers = append(workers, g.start(t, fmt.Sprintf("w%d", i)))
	}
	waitFor(t, "every worker says Redis does not answer", func() bool {
		for _, w := range workers {
			if !strings.Contains(w.log.String(), "queue: Redis: ") {
				return false
			}
		}
		return true
	})
	startRedis(t, r)

	kinds := []jobKind{
		{"ok", `{"commands":[{"args":["/bin/echo","hi"]}]}`, verdict("OK", 0), ""},
		{"re", `{"commands":[{"args":["/bin/sh","-c","exit 3"]}]}`, verdict("RE", 0), ""},
		{"to", `{"commands":[{"args":["/bin/sh","-c","while :; do :; done"],"cpu_time_ms":200}]}`, verdict("TO", 0), ""},
		{"ml", `{"commands":[{"args":["/usr/bin/python3","-c","b = bytearray(512 << 20)"],"memory_bytes":67108864}]}`, verdict("ML", 0), ""},
		{"pair", `{"commands":[{"args":["/bin/sh","-c","seq 1 100"]},{"args":["/usr/bin/wc","-l"]}],"pipes":[{"from":{"cmd":0,"fd":1},"to":{"cmd":1,"fd":0}}]}`, verdict("OK", 1), ""},
		{"ce", `{"lang":"c","source":"int main( {"}`, func(status, body string) error {
			var r struct{ Status string }
			if status != "200" || json.Unmarshal([]byte(body), &r) != nil || r.Status != "CE" {
				return fmt.Errorf("want a 200 answer with CE, got %s %s", status, body)
			}
			return nil
		}, "exec"},
	}
	bad := jobKind{"bad", `{"commands":[{"args":["/bin/true"],"memroy_bytes":1}]}`, func(status, body string) error {
		if status != "400" || !strings.Contains(body, `"field":"commands[0].memroy_bytes"`) {
			return fmt.Errorf("want the API's 400 naming commands[0].memroy_bytes, got %s %s", status, body)
		}
		return nil
	}, ""}
	// Slow jobs first, one per slot: one of them is running on the
	// worker that is killed.
	want := map[string]jobKind{}
	pipe := rdb.Pipeline()
	add := func(id string, k jobKind) {
		want[id] = k
		endpoint := k.endpoint
		if endpoint == "" {
			endpoint = "run"
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Jobs, Values: []string{"id", id, "endpoint", endpoint, "body", k.body}})
	}
	slow := jobKind{"slow", `{"commands":[{"args":["/bin/sh","-c","sleep 2; : ` + marker + `"]}]}`, verdict("OK", 0), ""}
	for i := range 6 {
		add(fmt.Sprintf("slow-%d", i), slow)
	}
	add("bad", bad)
	for i := range jobs {
		k := kinds[i%len(kinds)]
		add(fmt.Sprintf("%s-%d", k.name, i), k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}

	// w0 dies while one of its jobs runs.
	waitFor(t, "w0 runs a slow job", func() bool {
		p, _ := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: keys.Jobs, Group: "isolate-workers", Start: "-", End: "+", Count: 100, Consumer: "w0"}).Result()
		return len(p) > 0 && processWith(marker)
	})
	workers[0].cmd.Process.Kill()
	workers[0].cmd.Wait()
	// Its boxes die with it.
	workers = append(workers, g.start(t, "w3"))

	// Redis goes away mid-run and comes back with what it had.
	r.stop()
	time.Sleep(outage)
	startRedis(t, r)

	ids := append([]string{"poison"}, keysOf(want)...)
	waitProgress(t, "every job has a result", func() (int64, bool) {
		n, err := rdb.Exists(ctx, resultKeys(keys, ids)...).Result()
		return n, err == nil && n == int64(len(ids))
	})

	// Exactly one announcement of each, and the dead letters.
	announced := map[string]int{}
	for _, m := range rdb.XRange(ctx, keys.Results, "-", "+").Val() {
		announced[m.Values["id"].(string)]++
	}
	dead := map[string]string{}
	for _, m := range rdb.XRange(ctx, keys.Dead, "-", "+").Val() {
		id := m.Values["id"].(string)
		if _, twice := dead[id]; twice {
			t.Errorf("job %s has two dead letters", id)
		}
		dead[id] = m.Values["reason"].(string)
	}
	for _, id := range ids {
		if announced[id] != 1 {
			t.Errorf("job %s: announced %d times, want once", id, announced[id])
		}
		res := rdb.HGetAll(ctx, keys.Result(id)).Val()
		if id == "poison" {
			if res["status"] != "" || !strings.Contains(res["dead_letter"], "delivered 4 times without a result") || !strings.Contains(dead[id], "delivered 4 times") {
				t.Errorf("poison: result %v, dead letter %q", res, dead[id])
			}
			continue
		}
		if err := want[id].check(res["status"], res["body"]); err != nil {
			t.Errorf("job %s: %v", id, err)
		}
		if _, ok := dead[id]; ok != (id == "bad") {
			t.Errorf("job %s: dead letter %q", id, dead[id])
		}
	}
	if !strings.Contains(dead["bad"], "commands[0].memroy_bytes: unknown field") {
		t.Errorf("the bad job's dead letter says %q, want the API's 400 message", dead["bad"])
	}
	if n := rdb.XLen(ctx, keys.Jobs).Val(); n != 0 {
		t.Errorf("%d jobs left in the stream", n)
	}
	if p := rdb.XPending(ctx, keys.Jobs, "isolate-workers").Val(); p.Count != 0 {
		t.Errorf("%d jobs left pending", p.Count)
	}

	// A job whose result exists is acknowledged without running: its
	// result stays the first job's.
	before := rdb.HGet(ctx, keys.Result("ok-0"), "body").Val()
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Jobs, Values: []string{"id", "ok-0", "body", `{"commands":[{"args":["/bin/echo","again"]}]}`}})
	waitFor(t, "the repeated job is acknowledged", func() bool { return rdb.XLen(ctx, keys.Jobs).Val() == 0 })
	if after := rdb.HGet(ctx, keys.Result("ok-0"), "body").Val(); after != before {
		t.Errorf("a job whose result existed ran again: %s", after)
	}
	if n := len(rdb.XRange(ctx, keys.Results, "-", "+").Val()); n != len(ids) {
		t.Errorf("%d announcements for %d jobs", n, len(ids))
	}

	// The survivors drain on SIGTERM and take their announcements with them.
	for _, w := range workers[1:] {
		w.cmd.Process.Signal(syscall.SIGTERM)
		if err := w.cmd.Wait(); err != nil {
			t.Errorf("%s: SIGTERM: %v\n%s", w.name, err, w.log)
		}
	}
	// (The killed w0's expires by itself.)
	for _, left := range rdb.Keys(ctx, "isolate:worker:*").Val() {
		if left != "isolate:worker:w0" {
			t.Errorf("announcement %s is left after its worker drained", left)
		}
	}
	// One line per outage it saw (at the start; mid-run, unless it
	// sent Redis nothing then), and one when Redis is back.
	for _, w := range workers[1:3] {
		lost, back := strings.Count(w.log.String(), "queue: Redis: "), strings.Count(w.log.String(), "queue: Redis answers again")
		if lost < 1 || lost > 2 || back != lost {
			t.Errorf("%s logged %d outages and %d returns, want 1 or 2 of each:\n%s", w.name, lost, back, w.log)
		}
	}

	// Nothing left: no box process, no box cgroup.
	g.nothingLeft(t)
}

func keysOf(m map[string]jobKind) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func resultKeys(k Keys, ids []string) []string {
	var ks []string
	for _, id := range ids {
		ks = append(ks, k.Result(id))
	}
	return ks
}

// processWith tells whether a process whose command line holds marker
// exists.
func processWith(marker string) bool {
	cmds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmds {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(marker)) && !bytes.Contains(b, []byte("queue.test")) {
			return true
		}
	}
	return false
}

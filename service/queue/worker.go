package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/isolate-sandbox/isolate/service/caller"
)

// Answerer sends a request through the service's handlers in-process
// (server.Server.Answer).
type Answerer func(ctx context.Context, who caller.Caller, method, path string, body string) (int, []byte)

// Config is a worker's settings.
type Config struct {
	// URL is the Redis server: redis://[user:pass@]host:port/db,
	// rediss://... (TLS) or unix:///path/to/socket?db=N.
	URL string
	// Prefix names every key: PREFIX:jobs (the jobs stream),
	// PREFIX:results (the results stream), PREFIX:dead (dead letters),
	// PREFIX:result:ID (a result), PREFIX:worker:NAME (an announcement).
	Prefix string
	Group  string // the consumer group, created if missing
	Name   string // this worker: its consumer name, unique in the group
	// Version is announced with the worker.
	Version string
	// Capacity is how many jobs the worker runs at once.
	Capacity int
	// ClaimIdle is how long a job delivered to a worker may stay
	// unanswered with nobody renewing it before another worker claims it,
	// and only while its worker has no live announcement. A running job
	// is renewed every ClaimIdle/3, and at once when Redis answers again
	// after an outage, so only a dead worker's jobs are claimed.
	ClaimIdle time.Duration
	// MaxDeliveries: a job delivered more often goes to the dead letters.
	MaxDeliveries int
	// ResultTTL is how long a result is kept.
	ResultTTL time.Duration
	// ResultsMax is about how many announcements the results stream keeps.
	ResultsMax int64
	Answer     Answerer
	// Ready tells whether the service can make boxes now (its self-test
	// passes), and the images it has built; nil: always, every image.
	// A worker that is not ready reads no job, and one that lacks an
	// image a job needs hands the job back for a worker that has it.
	Ready func() (ready bool, images []string)
	// Recheck, after a job's answer reported XX, tells whether the
	// service's own machinery still makes boxes (nil: it does). When it
	// does not, the XX was the worker's, not the job's: the job is handed
	// back for another worker, not answered.
	Recheck func(ctx context.Context) error
	// MaxHandBacks bounds how often a job is handed back before it goes
	// to the dead letters (a job some live worker announces it can run
	// is handed back; one none can goes there at once).
	MaxHandBacks int
	// Log prints one line about the queue (Redis lost and back).
	Log func(string)
	// MaxBodyBytes bounds a job's fields, its body among them (the
	// service's --max-body; DefaultMaxBodyBytes when 0): a job with a
	// longer one is a dead letter, its fields' lengths read inside Redis
	// (readScript), never the field itself.
	MaxBodyBytes int64
}

// DefaultMaxBodyBytes bounds a job's fields when Config says nothing (as
// the service's --max-body does its bodies by default).
const DefaultMaxBodyBytes = 4 << 20

// defaults fills what c leaves unset.
func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = "isolate"
	}
	if c.Group == "" {
		c.Group = "isolate-workers"
	}
	if c.Capacity < 1 {
		c.Capacity = 1
	}
	if c.ClaimIdle <= 0 {
		c.ClaimIdle = 30 * time.Second
	}
	if c.MaxDeliveries < 1 {
		c.MaxDeliveries = 3
	}
	if c.ResultTTL <= 0 {
		c.ResultTTL = 24 * time.Hour
	}
	if c.ResultsMax <= 0 {
		c.ResultsMax = 100000
	}
	if c.MaxHandBacks <= 0 {
		c.MaxHandBacks = 10000
	}
	if c.Log == nil {
		c.Log = func(string) {}
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
}

// Keys are the Redis keys of a prefix.
type Keys struct{ Jobs, Results, Dead, prefix string }

// KeysOf are the keys under prefix.
func KeysOf(prefix string) Keys {
	return Keys{Jobs: prefix + ":jobs", Results: prefix + ":results", Dead: prefix + ":dead", prefix: prefix}
}

// Result is the key of job id's result.
func (k Keys) Result(id string) string { return k.prefix + ":result:" + id }

// Worker is one consumer of the jobs stream.
type Worker struct {
	cfg  Config
	keys Keys
	rdb  *redis.Client

	slots   chan struct{} // one per job being run
	running atomic.Int64
	jobs    sync.WaitGroup
	// jobCtx is every job's context: cancelled when a drain's grace ends.
	jobCtx    context.Context
	cancelJob context.CancelFunc
	draining  atomic.Bool
	stopped   chan struct{}

	// held are the entries delivered to this worker and not yet finished,
	// which it renews.
	heldMu sync.Mutex
	held   map[string]bool
	// renewHeld is set when Redis answers again after an outage: the
	// loop renews what it holds before it reads or claims anything.
	renewHeld atomic.Bool
	// claimAfter (Unix ns): no claim before, after an outage.
	claimAfter atomic.Int64
	// readAfter (Unix ns): no read of new jobs before, once this worker
	// handed one back (handBackYield).
	readAfter atomic.Int64
	notReady  bool // the loop's: it logged that it takes no jobs

	redisUp             atomic.Bool
	outage              sync.Mutex // logOutage's state
	inOutage            bool
	claims              prometheus.Counter
	deadLetters         *prometheus.CounterVec
	outcomes            *prometheus.CounterVec
	lag, pending, depth prometheus.Gauge
}

// New makes a worker of cfg; Run starts it.
func New(cfg Config) (*Worker, error) {
	cfg.defaults()
	if cfg.Name == "" {
		return nil, errors.New("a worker needs a name")
	}
	if cfg.Answer == nil {
		return nil, errors.New("a worker needs a service to answer its jobs")
	}
	opts, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("--queue-url: %v (want redis://[user:pass@]host:port/db, rediss://... or unix:///path)", err)
	}
	// The worker logs one line of its own per outage; go-redis would log
	// every failed dial.
	redis.SetLogger(quiet{})
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	opts.DisableIdentity = true
	opts.PoolSize = cfg.Capacity + 4
	w := &Worker{cfg: cfg, keys: KeysOf(cfg.Prefix), rdb: redis.NewClient(opts),
		slots: make(chan struct{}, cfg.Capacity), stopped: make(chan struct{}), held: map[string]bool{}}
	w.jobCtx, w.cancelJob = context.WithCancel(context.Background())
	w.claims = prometheus.NewCounter(prometheus.CounterOpts{Name: "isolate_queue_claims_total", Help: "Jobs this worker claimed from a dead worker (idle past --queue-claim-idle, its worker without a live announcement), or took again when the answer of its own delivery was lost."})
	w.deadLetters = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isolate_queue_dead_letters_total", Help: "Jobs this worker sent to the dead-letter stream, by reason: refused (the API answered 4xx), malformed (no usable id or fields), poison (delivered too often), unrunnable (no live worker has an image it needs, or handed back too often)."}, []string{"reason"})
	w.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isolate_queue_jobs_total", Help: "Jobs this worker finished, by outcome: answered, dead (a dead letter), duplicate (its result existed: acknowledged without running), handed_back (back to the stream for another worker: an image this one lacks, its own machinery failed, or it was stopping)."}, []string{"outcome"})
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	w.lag = gauge("isolate_queue_lag_seconds", "Age of the oldest job in the stream, waiting or delivered and unanswered (a finished job is deleted), by Redis's clock; 0 when the stream is empty.")
	w.pending = gauge("isolate_queue_pending_jobs", "Jobs delivered to a worker of the group and not yet acknowledged.")
	w.depth = gauge("isolate_queue_depth_jobs", "Jobs in the stream: waiting or pending (a finished job is deleted).")
	for _, r := range []string{"refused", "malformed", "poison", "unrunnable"} {
		w.deadLetters.WithLabelValues(r)
	}
	for _, o := range []string{"answered", "dead", "duplicate", "handed_back"} {
		w.outcomes.WithLabelValues(o)
	}
	return w, nil
}

// Name is the worker's consumer name.
func (w *Worker) Name() string { return w.cfg.Name }

// quiet drops go-redis's own log lines.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Metrics are the worker's collectors, for the service's /metrics.
func (w *Worker) Metrics() []prometheus.Collector {
	return []prometheus.Collector{w.claims, w.deadLetters, w.outcomes, w.lag, w.pending, w.depth,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "isolate_queue_running_jobs", Help: "Jobs this worker is running."},
			func() float64 { return float64(w.running.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "isolate_queue_redis_up", Help: "1 when the worker's last Redis command succeeded."},
			func() float64 {
				if w.redisUp.Load() {
					return 1
				}
				return 0
			})}
}

// Run takes jobs until ctx ends, then drains: it takes no more and waits
// for the running jobs to be answered and acknowledged (Drain bounds the
// wait).
func (w *Worker) Run(ctx context.Context) {
	defer close(w.stopped)
	hb, stopHB := context.WithCancel(context.Background())
	heartbeatDone := make(chan struct{})
	go func() { w.heartbeat(hb); close(heartbeatDone) }()
	w.loop(ctx)
	w.draining.Store(true)
	w.jobs.Wait()
	stopHB()
	<-heartbeatDone
	// Gone at once, not after the announcement's expiry.
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	w.rdb.Del(dctx, w.workerKey())
	cancel()
	w.rdb.Close()
}

// Drain waits for Run (whose ctx the caller has cancelled) to finish its
// jobs, at most grace; then it cancels them (their boxes are killed, and
// their jobs stay pending for another worker) and waits for Run to end.
func (w *Worker) Drain(grace time.Duration) {
	select {
	case <-w.stopped:
	case <-time.After(grace):
		w.cancelJob()
		<-w.stopped
	}
	w.cancelJob()
}

// notReadyWait is how often a worker that is not ready asks again.
const notReadyWait = 500 * time.Millisecond

// ready tells whether the service can make boxes now (Config.Ready), and
// logs the changes.
func (w *Worker) ready() bool {
	ok := w.cfg.Ready == nil
	if !ok {
		ok, _ = w.cfg.Ready()
	}
	if !ok && !w.notReady {
		w.cfg.Log("queue: the service cannot make boxes (its health says why); taking no jobs until it can")
	} else if ok && w.notReady {
		w.cfg.Log("queue: the service makes boxes again; taking jobs")
	}
	w.notReady = !ok
	return ok
}

// loop reads jobs while there are free slots and the service is ready,
// retrying Redis with backoff.
func (w *Worker) loop(ctx context.Context) {
	backoff := newBackoff()
	groupMade := false
	var lastClaim time.Time
	// Claims scan the pending entries a window at a time: the next scan
	// goes on where the last ended, and starts over at the end.
	claimFrom := "-"
	for ctx.Err() == nil {
		if !groupMade {
			err := w.rdb.XGroupCreateMkStream(ctx, w.keys.Jobs, w.cfg.Group, "0").Err()
			if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
				w.failed(ctx, err, backoff)
				continue
			}
			groupMade = true
			w.ok(backoff)
		}
		if w.renewHeld.Load() {
			// Redis is back: what this worker holds is renewed before
			// anything else, so that no live worker takes it for a dead
			// one's; and the others get as long to do the same.
			if _, err := w.renewMine(w.jobCtx, w.heldIDs()); err != nil {
				w.failed(ctx, err, backoff)
				continue
			}
			w.renewHeld.Store(false)
		}
		if !w.ready() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(notReadyWait):
			}
			continue
		}
		// A slot first: the worker takes only what it can run now.
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		free := 1
		for free < w.cfg.Capacity {
			select {
			case w.slots <- struct{}{}:
				free++
				continue
			default:
			}
			break
		}
		// Read under the jobs' context, not ctx: a read cut short by the
		// drain could leave a job delivered to this worker and unseen.
		// The read never blocks (a script; the loop asks again every
		// pollEvery), so the drain is not kept waiting.
		var msgs []delivery
		var err error
		claimed := false
		// (A worker whose loop waited for slots through an outage its
		// heartbeat saw claims nothing before a command of its own has
		// ended that outage and it has renewed what it holds.)
		if time.Since(lastClaim) >= w.cfg.ClaimIdle/3 && w.redisUp.Load() && !w.renewHeld.Load() &&
			time.Now().UnixNano() > w.claimAfter.Load() {
			var next string
			msgs, next, err = w.claimDead(w.jobCtx, claimFrom, free)
			if err == nil {
				if claimFrom = next; next == "-" {
					lastClaim = time.Now() // a whole scan done
				}
				claimed = len(msgs) > 0
			}
		}
		if wait := time.Until(time.Unix(0, w.readAfter.Load())); err == nil && len(msgs) == 0 && wait > 0 {
			// It just handed a job back: the others read first.
			for range free {
				<-w.slots
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		if err == nil && len(msgs) == 0 {
			msgs, err = w.read(w.jobCtx, free)
		}
		for range free - len(msgs) {
			<-w.slots
		}
		if err == nil && len(msgs) == 0 {
			// Nothing waits: ask again soon (pollEvery).
			select {
			case <-ctx.Done():
				return
			case <-time.After(pollEvery):
			}
			continue
		}
		if err != nil {
			if strings.Contains(err.Error(), "NOGROUP") { // (in a script's error too)
				groupMade = false // Redis lost the stream (restarted without it)
			}
			w.failed(ctx, err, backoff)
			continue
		}
		w.ok(backoff)
		if claimed {
			w.claims.Add(float64(len(msgs)))
		}
		for _, m := range msgs {
			w.hold(m.ID, true)
			w.jobs.Add(1)
			w.running.Add(1)
			go func() {
				defer func() { w.hold(m.ID, false); w.running.Add(-1); <-w.slots; w.jobs.Done() }()
				w.handle(m)
			}()
		}
	}
}

// hold notes that entry id is this worker's (or no longer is).
func (w *Worker) hold(id string, held bool) {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	if held {
		w.held[id] = true
	} else {
		delete(w.held, id)
	}
}

// holds tells whether entry id is this worker's, running or finishing.
func (w *Worker) holds(id string) bool {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	return w.held[id]
}

func (w *Worker) heldIDs() []string {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	ids := make([]string, 0, len(w.held))
	for id := range w.held {
		ids = append(ids, id)
	}
	return ids
}

// claimScanCount is how many pending entries one claim scan looks at.
const claimScanCount = 100

// claimDead claims, for this worker, up to n pending entries idle past
// ClaimIdle whose worker has no live announcement (a dead worker's: a
// live one renews its own and announces itself every heartbeatEvery), or
// that are pending for this worker but not held by it (delivered with
// an answer that never arrived), from
// the scan's position from; next is where the next scan starts ("-": a
// whole scan is done). The claim counts a delivery, as XAUTOCLAIM's.
func (w *Worker) claimDead(ctx context.Context, from string, n int) (msgs []delivery, next string, err error) {
	p, err := w.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: w.keys.Jobs, Group: w.cfg.Group,
		Idle: w.cfg.ClaimIdle, Start: from, End: "+", Count: claimScanCount}).Result()
	if err != nil {
		return nil, from, err
	}
	next = "-"
	if len(p) == claimScanCount {
		next = "(" + p[len(p)-1].ID
	}
	alive := map[string]bool{}
	var ids []string
	for _, e := range p {
		if len(ids) == n {
			next = "(" + ids[len(ids)-1]
			break
		}
		if e.Consumer == w.cfg.Name {
			if !w.holds(e.ID) {
				// Delivered here but never seen: Redis ran the read or
				// claim and the answer was lost with the connection (an
				// outage beginning). No other worker claims it while
				// this one is announced: it takes it again.
				ids = append(ids, e.ID)
			}
			continue // one it runs: renewed, not claimed
		}
		live, seen := alive[e.Consumer]
		if !seen {
			k, err := w.rdb.Exists(ctx, w.keys.prefix+":worker:"+e.Consumer).Result()
			if err != nil {
				return nil, from, err
			}
			live = k == 1
			alive[e.Consumer] = live
		}
		if !live {
			ids = append(ids, e.ID)
		}
	}
	if len(ids) == 0 {
		return nil, next, nil
	}
	// MinIdle again: an entry its worker renewed since the scan stays its.
	args := []any{w.cfg.Group, w.cfg.Name, w.cfg.MaxBodyBytes, w.cfg.ClaimIdle.Milliseconds()}
	for _, id := range ids {
		args = append(args, id)
	}
	got, err := claimScript.Run(ctx, w.rdb, []string{w.keys.Jobs}, args...).Result()
	if err != nil {
		return nil, from, err
	}
	msgs, err = deliveries(got)
	return msgs, next, err
}

// handle runs one delivered message to its end: answered, dead-lettered,
// handed back for another worker (an image this one lacks, its own
// machinery failing, the service stopping), or left pending for another
// delivery (Redis lost past the drain, the drain's grace ended).
func (w *Worker) handle(m delivery) {
	ctx := w.jobCtx
	job, err := DecodeJob(m.Values)
	if m.over != "" {
		// Never read: its fields are what Redis said of their lengths.
		w.deadLetters.WithLabelValues("malformed").Inc()
		w.finish(ctx, m.ID, Job{ID: job.ID, Endpoint: job.Endpoint}, finishing{dead: m.over, validID: checkID(job.ID) == nil})
		return
	}
	if err != nil {
		w.deadLetters.WithLabelValues("malformed").Inc()
		w.finish(ctx, m.ID, job, finishing{dead: err.Error(), validID: checkID(job.ID) == nil})
		return
	}
	deliveries := m.deliveries
	var exists int64
	if err := w.retry(ctx, func() error {
		var err error
		exists, err = w.rdb.Exists(ctx, w.keys.Result(job.ID)).Result()
		return err
	}); err != nil {
		return
	}
	if exists == 1 {
		// Answered before: by a worker that died between storing and
		// acknowledging, or by a job of the same id.
		w.outcomes.WithLabelValues("duplicate").Inc()
		w.finish(ctx, m.ID, job, finishing{})
		return
	}
	if poisoned, why := Poisoned(deliveries+job.Attempts, w.cfg.MaxDeliveries); poisoned {
		w.deadLetters.WithLabelValues("poison").Inc()
		w.finish(ctx, m.ID, job, finishing{dead: why, validID: true, deliveries: deliveries + job.Attempts})
		return
	}
	if missing := w.missingImages(job); len(missing) > 0 {
		w.handBack(ctx, m.ID, job, deliveries, missing, fmt.Sprintf("image %s is not built on %s", strings.Join(missing, ", "), w.cfg.Name))
		return
	}
	stopRenewing := w.renew(m.ID)
	status, body := w.cfg.Answer(ctx, caller.QueueJob, "POST", job.Path(), job.Body)
	// The API's own callers filled the service's waiting queue (429):
	// the job waits here, holding its slot of the worker, rather than
	// counting a delivery each time it is turned away.
	for b := newBackoff(); status == http.StatusTooManyRequests && ctx.Err() == nil && !w.draining.Load(); {
		b.wait(ctx)
		status, body = w.cfg.Answer(ctx, caller.QueueJob, "POST", job.Path(), job.Body)
	}
	if ctx.Err() == nil && status == http.StatusOK && w.cfg.Recheck != nil && HasXX(job.Endpoint, body) {
		// The sandbox failed: the job's doing, or this worker's? The
		// service's self-test tells; a worker that cannot make boxes
		// hands the job to one that can (and reads no more until it
		// can again).
		if err := w.cfg.Recheck(ctx); err != nil && ctx.Err() == nil {
			stopRenewing()
			w.handBack(ctx, m.ID, job, deliveries, nil, fmt.Sprintf("%s could not make boxes: %v", w.cfg.Name, err))
			return
		}
	}
	stopRenewing()
	if ctx.Err() != nil {
		return // the drain's grace ended: the answer is the stop's, not the job's
	}
	outcome, why := Judge(status, body)
	switch outcome {
	case Retry:
		// The service is stopping or drained (503), or this worker is
		// (a 429 it no longer waits out): the job goes back to the
		// stream for another worker, at once, not a failed delivery.
		w.handBack(ctx, m.ID, job, deliveries, nil, fmt.Sprintf("%s is stopping (HTTP %d)", w.cfg.Name, status))
		return
	case DeadLetter:
		w.deadLetters.WithLabelValues("refused").Inc()
	}
	w.finish(ctx, m.ID, job, finishing{validID: true, answered: true, status: status, body: body, dead: why, deliveries: deliveries})
}

// renewScript resets the idle time of each entry given that is still
// pending for this consumer (XCLAIM JUSTID to itself: no delivery
// counted), and leaves alone one that another worker has claimed: a
// worker never takes back a job it lost. It returns the entries lost
// (also those of a stream or group Redis no longer has).
var renewScript = redis.NewScript(`
local lost = {}
for i = 3, #ARGV do
  local ok, p = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if ok and #p == 1 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    table.insert(lost, ARGV[i])
  end
end
return lost
`)

// renewMine renews the entries ids this worker holds (renewScript), and
// tells which are no longer its own.
func (w *Worker) renewMine(ctx context.Context, ids []string) (lost []string, err error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := []any{w.cfg.Group, w.cfg.Name}
	for _, id := range ids {
		args = append(args, id)
	}
	lost, err = renewScript.Run(ctx, w.rdb, []string{w.keys.Jobs}, args...).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for _, id := range lost {
		w.cfg.Log(fmt.Sprintf("queue: job entry %s is no longer pending for this worker (another claimed it, or Redis lost it); not renewed", id))
	}
	return lost, nil
}

// renew keeps the job's pending entry fresh while it runs, every
// ClaimIdle/3 (renewMine), so that no worker claims a job that is still
// running.
func (w *Worker) renew(id string) (stop func()) {
	ctx, cancel := context.WithCancel(w.jobCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.ClaimIdle / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if lost, _ := w.renewMine(ctx, []string{id}); len(lost) > 0 {
					return
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// missingImages are the images job j needs that this service lacks.
func (w *Worker) missingImages(j Job) []string {
	if w.cfg.Ready == nil {
		return nil
	}
	_, have := w.cfg.Ready()
	var missing []string
	for _, img := range j.Images() {
		if !slices.Contains(have, img) {
			missing = append(missing, img)
		}
	}
	return missing
}

// handBackPause is how long a worker waits before it hands back again a
// job it has handed back before (the worker that can run it may be
// busy): 100 ms for each hand-back of the job so far, at most 5 s.
func handBackPause(handedBack int) time.Duration {
	return min(time.Duration(handedBack)*100*time.Millisecond, 5*time.Second)
}

// handBackYield is how long a worker that handed a job back reads no
// new one: its freed slot would otherwise read the very entry it added
// at once, before an idle worker that can run it asks (every pollEvery).
const handBackYield = 3 * pollEvery

// handBackScript adds the job again at the end of the stream, and
// acknowledges and deletes the entry delivered here: at once, so the job
// is in the stream exactly once. Only while the entry is still pending
// for this consumer: run again after its answer was lost (an outage), or
// after another worker claimed the entry, it adds nothing.
var handBackScript = redis.NewScript(`
local ok, p = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if not ok or #p ~= 1 or p[1][2] ~= ARGV[3] then
  return 0
end
redis.call('XADD', KEYS[1], '*', unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
`)

// handBack gives a job this worker cannot run back to the stream for
// another worker (a new entry: not a failed delivery), with why; it goes
// to the dead letters instead when no live worker announces the images
// it needs, or when it was handed back MaxHandBacks times.
func (w *Worker) handBack(ctx context.Context, msgID string, job Job, deliveries int64, images []string, why string) {
	dead := ""
	if job.HandedBack >= w.cfg.MaxHandBacks {
		dead = fmt.Sprintf("handed back %d times without a worker that could run it; last: %s", job.HandedBack, why)
	} else if len(images) > 0 {
		capable, names, err := w.capableWorkers(ctx, images)
		if err != nil {
			return // Redis lost past the drain: the entry stays pending
		}
		if len(capable) == 0 {
			dead = fmt.Sprintf("no live worker can run it: image %s is built on none of %s", strings.Join(images, ", "), strings.Join(names, ", "))
		}
	}
	if dead != "" {
		w.deadLetters.WithLabelValues("unrunnable").Inc()
		w.finish(ctx, msgID, job, finishing{dead: dead, validID: true, deliveries: deliveries + job.Attempts})
		return
	}
	if slices.Contains(job.Lacking, w.cfg.Name) {
		stopRenewing := w.renew(msgID) // the pause may outlast --queue-claim-idle
		select {
		case <-ctx.Done():
		case <-time.After(handBackPause(job.HandedBack)):
		}
		stopRenewing()
		if ctx.Err() != nil {
			return
		}
	}
	next := job
	next.HandedBack++
	next.Attempts = job.Attempts + deliveries - 1 // this delivery failed nothing
	if !slices.Contains(next.Lacking, w.cfg.Name) {
		next.Lacking = append(slices.Clone(job.Lacking), w.cfg.Name)
	}
	args := append([]any{w.cfg.Group, msgID, w.cfg.Name}, next.Fields()...)
	var handed int64
	if err := w.retry(ctx, func() error {
		var err error
		handed, err = handBackScript.Run(ctx, w.rdb, []string{w.keys.Jobs}, args...).Int64()
		return err
	}); err != nil || handed == 0 {
		return
	}
	w.readAfter.Store(time.Now().Add(handBackYield).UnixNano())
	w.outcomes.WithLabelValues("handed_back").Inc()
	w.cfg.Log(fmt.Sprintf("queue: job %s handed back for another worker: %s", job.ID, why))
}

// capableWorkers are the live workers besides this one whose
// announcement lists every image of images (one that lists none, of an
// older version, may have them), and the names of every live worker.
func (w *Worker) capableWorkers(ctx context.Context, images []string) (capable, names []string, err error) {
	var keys []string
	err = w.retry(ctx, func() error {
		keys = keys[:0]
		iter := w.rdb.Scan(ctx, 0, w.keys.prefix+":worker:*", 100).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return iter.Err()
	})
	if err != nil {
		return nil, nil, err
	}
	for _, k := range keys {
		v, err := w.rdb.Get(ctx, k).Result()
		if err != nil {
			continue // expired meanwhile
		}
		var a announcement
		if json.Unmarshal([]byte(v), &a) != nil {
			continue
		}
		names = append(names, a.Name)
		if a.Name == w.cfg.Name {
			continue
		}
		ok := true
		if a.Images != nil {
			for _, img := range images {
				ok = ok && slices.Contains(*a.Images, img)
			}
		}
		if ok {
			capable = append(capable, a.Name)
		}
	}
	sort.Strings(names)
	return capable, names, nil
}

// finishing is how a job ends.
type finishing struct {
	validID    bool // its result may be stored under its id
	answered   bool
	status     int
	body       []byte
	dead       string // the dead letter's reason; "": none
	deliveries int64
}

// finishScript stores the result (unless one exists), announces it,
// dead-letters the job when it has a reason, and acknowledges and
// deletes the job: all at once, so a job is never acknowledged without
// its result, and a result is stored once.
var finishScript = redis.NewScript(`
local stored = 0
if ARGV[5] ~= '' and redis.call('EXISTS', KEYS[1]) == 0 then
  local fields = {'status', ARGV[6], 'body', ARGV[7], 'worker', ARGV[8]}
  if ARGV[9] ~= '' then
    table.insert(fields, 'dead_letter')
    table.insert(fields, ARGV[9])
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'id', ARGV[5], 'status', ARGV[6], 'dead_letter', ARGV[9])
  stored = 1
end
if ARGV[9] ~= '' and (stored == 1 or ARGV[5] == '') then
  redis.call('XADD', KEYS[4], '*', 'id', ARGV[5], 'reason', ARGV[9], 'status', ARGV[6], 'answer', ARGV[7],
    'endpoint', ARGV[10], 'job', ARGV[11], 'deliveries', ARGV[12], 'worker', ARGV[8], 'message', ARGV[4])
end
redis.call('XACK', KEYS[3], ARGV[3], ARGV[4])
redis.call('XDEL', KEYS[3], ARGV[4])
return stored
`)

// finish ends message id: its result and announcement, its dead letter,
// its acknowledgement (finishScript), retried while Redis is away.
func (w *Worker) finish(ctx context.Context, msgID string, job Job, f finishing) {
	id := ""
	if f.validID {
		id = job.ID
	}
	status := ""
	if f.answered {
		status = fmt.Sprint(f.status)
	}
	keys := []string{w.keys.Result(id), w.keys.Results, w.keys.Jobs, w.keys.Dead}
	args := []any{int64(w.cfg.ResultTTL / time.Second), w.cfg.ResultsMax, w.cfg.Group, msgID, id,
		status, f.body, w.cfg.Name, f.dead, job.Endpoint, job.Body, f.deliveries}
	var stored int64
	err := w.retry(ctx, func() error {
		var err error
		stored, err = finishScript.Run(ctx, w.rdb, keys, args...).Int64()
		return err
	})
	switch {
	case err != nil:
		// Lost with Redis past the drain: the job stays pending, and
		// another worker claims it.
	case f.dead != "" && (stored == 1 || id == ""):
		w.outcomes.WithLabelValues("dead").Inc()
	case f.answered && stored == 1:
		w.outcomes.WithLabelValues("answered").Inc()
	case f.answered:
		w.outcomes.WithLabelValues("duplicate").Inc()
	}
}

// announcement is what PREFIX:worker:NAME holds.
type announcement struct {
	Name     string    `json:"name"`
	Version  string    `json:"version"`
	Capacity int       `json:"capacity"`
	Running  int64     `json:"running"`
	Draining bool      `json:"draining"`
	LastSeen time.Time `json:"last_seen"`
	// Ready: the service makes boxes now; Images: the images it has
	// built (absent from a worker that does not say).
	Ready  bool      `json:"ready"`
	Images *[]string `json:"images,omitempty"`
}

// heartbeatEvery is how often a worker announces itself and reads the
// queue's lengths; its announcement expires after three misses
// (announceTTL).
const (
	heartbeatEvery = 2 * time.Second
	announceTTL    = 3 * heartbeatEvery
)

func (w *Worker) workerKey() string { return w.keys.prefix + ":worker:" + w.cfg.Name }

// heartbeat announces the worker and updates the queue's gauges until
// ctx ends.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		ready, images := true, []string{}
		if w.cfg.Ready != nil {
			ready, images = w.cfg.Ready()
			images = append([]string{}, images...)
		}
		a, _ := json.Marshal(announcement{Name: w.cfg.Name, Version: w.cfg.Version, Capacity: w.cfg.Capacity,
			Running: w.running.Load(), Draining: w.draining.Load(), LastSeen: time.Now().UTC(),
			Ready: ready, Images: &images})
		// The heartbeat sees an outage too, while the loop waits for a
		// free slot and sends Redis nothing (the loop's next command
		// that succeeds ends it).
		if err := w.rdb.Set(ctx, w.workerKey(), a, announceTTL).Err(); err != nil && ctx.Err() == nil {
			w.down(err)
		}
		if groups, err := w.rdb.XInfoGroups(ctx, w.keys.Jobs).Result(); err == nil {
			for _, g := range groups {
				if g.Name == w.cfg.Group {
					w.pending.Set(float64(g.Pending))
				}
			}
		}
		if lag, err := w.oldestAge(ctx); err == nil {
			w.lag.Set(lag.Seconds())
		}
		if n, err := w.rdb.XLen(ctx, w.keys.Jobs).Result(); err == nil {
			w.depth.Set(float64(n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// oldestAge is how long the oldest job in the stream has been there: a
// finished job is deleted, so the first entry is the oldest one waiting
// or running. Its id is Redis's clock in milliseconds when it was added
// (XADD *), read against Redis's clock now, so the workers' clocks do
// not matter.
func (w *Worker) oldestAge(ctx context.Context) (time.Duration, error) {
	got, err := oldestScript.Run(ctx, w.rdb, []string{w.keys.Jobs}).StringSlice()
	if err != nil || len(got) != 3 || got[0] == "" {
		return 0, err
	}
	sec, err1 := strconv.ParseInt(got[1], 10, 64)
	usec, err2 := strconv.ParseInt(got[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("redis TIME: %q", got[1:])
	}
	return AgeOf(got[0], time.Unix(sec, usec*1000)), nil
}

// oldestScript answers the id of the jobs stream's first entry ("" when
// empty) and Redis's clock (TIME): the entry's fields stay in Redis.
var oldestScript = redis.NewScript(`
local r = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
local t = redis.call('TIME')
local id = ''
if r[1] then id = r[1][1] end
return {id, t[1], t[2]}
`)

// AgeOf is the age at now of the stream entry id (MS-SEQ, MS Redis's
// clock when it was added): 0 for an id that is not such, or from the
// future.
func AgeOf(id string, now time.Time) time.Duration {
	msPart, _, _ := strings.Cut(id, "-")
	ms, err := strconv.ParseInt(msPart, 10, 64)
	if err != nil {
		return 0
	}
	return max(now.Sub(time.UnixMilli(ms)), 0)
}

// backoff is the wait between tries of Redis: doubling from firstBackoff
// to 5 s.
type backoff struct{ next time.Duration }

const firstBackoff = 100 * time.Millisecond

func newBackoff() *backoff { return &backoff{next: firstBackoff} }

func (b *backoff) wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(b.next):
	}
	b.next = min(2*b.next, 5*time.Second)
}

// failed notes a failed Redis command: one log line when an outage
// begins, then a wait.
func (w *Worker) failed(ctx context.Context, err error, b *backoff) {
	if ctx.Err() != nil {
		return
	}
	w.down(err)
	b.wait(ctx)
}

// down notes that Redis does not answer: an outage begins, if none is
// under way (one log line).
func (w *Worker) down(err error) {
	w.redisUp.Store(false)
	w.outage.Lock()
	if !w.inOutage {
		w.inOutage = true
		w.cfg.Log(fmt.Sprintf("queue: Redis: %v; retrying with backoff, taking no jobs until it answers", err))
	}
	w.outage.Unlock()
}

// ok notes a successful Redis command: the outage, if any, is over.
func (w *Worker) ok(b *backoff) {
	b.next = firstBackoff
	w.up()
}

// up notes that Redis answers. At the end of an outage, the loop renews
// what this worker holds before it reads or claims anything, and claims
// nothing for an announcement's life, by which every live worker has
// renewed its own and announced itself again.
func (w *Worker) up() {
	w.redisUp.Store(true)
	w.outage.Lock()
	if w.inOutage {
		w.inOutage = false
		w.renewHeld.Store(true)
		w.claimAfter.Store(time.Now().Add(announceTTL).UnixNano())
		w.cfg.Log("queue: Redis answers again")
	}
	w.outage.Unlock()
}

// retry runs f until it succeeds or ctx ends (the drain's grace).
func (w *Worker) retry(ctx context.Context, f func() error) error {
	b := newBackoff()
	for {
		err := f()
		if err == nil {
			w.ok(b)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.failed(ctx, err, b)
	}
}

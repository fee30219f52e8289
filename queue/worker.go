package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/isolate-sandbox/isolate/caller"
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
	// unanswered with nobody renewing it before another worker claims it.
	// A running job is renewed every ClaimIdle/3, so only a dead
	// worker's jobs are claimed.
	ClaimIdle time.Duration
	// MaxDeliveries: a job delivered more often goes to the dead letters.
	MaxDeliveries int
	// ResultTTL is how long a result is kept.
	ResultTTL time.Duration
	// ResultsMax is about how many announcements the results stream keeps.
	ResultsMax int64
	Answer     Answerer
	// Log prints one line about the queue (Redis lost and back).
	Log func(string)
}

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
	if c.Log == nil {
		c.Log = func(string) {}
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
		slots: make(chan struct{}, cfg.Capacity), stopped: make(chan struct{})}
	w.jobCtx, w.cancelJob = context.WithCancel(context.Background())
	w.claims = prometheus.NewCounter(prometheus.CounterOpts{Name: "isolate_queue_claims_total", Help: "Jobs this worker claimed from a worker that stopped answering (XAUTOCLAIM)."})
	w.deadLetters = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isolate_queue_dead_letters_total", Help: "Jobs this worker sent to the dead-letter stream, by reason: refused (the API answered 4xx), malformed (no usable id or fields), poison (delivered too often)."}, []string{"reason"})
	w.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isolate_queue_jobs_total", Help: "Jobs this worker finished, by outcome: answered, dead (a dead letter), duplicate (its result existed: acknowledged without running), retry (left pending: the service was busy or stopping)."}, []string{"outcome"})
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	w.lag = gauge("isolate_queue_lag_seconds", "Age of the oldest job in the stream, waiting or delivered and unanswered (a finished job is deleted), by Redis's clock; 0 when the stream is empty.")
	w.pending = gauge("isolate_queue_pending_jobs", "Jobs delivered to a worker of the group and not yet acknowledged.")
	w.depth = gauge("isolate_queue_depth_jobs", "Jobs in the stream: waiting or pending (a finished job is deleted).")
	for _, r := range []string{"refused", "malformed", "poison"} {
		w.deadLetters.WithLabelValues(r)
	}
	for _, o := range []string{"answered", "dead", "duplicate", "retry"} {
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

// loop reads jobs while there are free slots, retrying Redis with
// backoff.
func (w *Worker) loop(ctx context.Context) {
	backoff := newBackoff()
	groupMade := false
	var lastClaim time.Time
	// XAUTOCLAIM scans the pending entries a window at a time: the next
	// scan goes on where the last ended, and starts over at the end.
	claimFrom := "0-0"
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
		// The block is short, so the drain is not kept waiting.
		var msgs []redis.XMessage
		var err error
		claimed := false
		if time.Since(lastClaim) >= w.cfg.ClaimIdle/3 {
			var next string
			msgs, next, err = w.rdb.XAutoClaim(w.jobCtx, &redis.XAutoClaimArgs{Stream: w.keys.Jobs, Group: w.cfg.Group,
				Consumer: w.cfg.Name, MinIdle: w.cfg.ClaimIdle, Start: claimFrom, Count: int64(free)}).Result()
			if err == nil {
				if claimFrom = next; next == "0-0" {
					lastClaim = time.Now() // a whole scan done
				}
				claimed = len(msgs) > 0
			}
		}
		if err == nil && len(msgs) == 0 {
			var streams []redis.XStream
			streams, err = w.rdb.XReadGroup(w.jobCtx, &redis.XReadGroupArgs{Group: w.cfg.Group, Consumer: w.cfg.Name,
				Streams: []string{w.keys.Jobs, ">"}, Count: int64(free), Block: time.Second}).Result()
			if errors.Is(err, redis.Nil) {
				err = nil
			}
			for _, s := range streams {
				msgs = append(msgs, s.Messages...)
			}
		}
		for range free - len(msgs) {
			<-w.slots
		}
		if err != nil {
			if strings.HasPrefix(err.Error(), "NOGROUP") {
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
			w.jobs.Add(1)
			w.running.Add(1)
			go func() {
				defer func() { w.running.Add(-1); <-w.slots; w.jobs.Done() }()
				w.handle(m, claimed)
			}()
		}
	}
}

// handle runs one delivered message to its end: answered, dead-lettered,
// or left pending for another delivery (the service busy or stopping,
// Redis lost past the drain).
func (w *Worker) handle(m redis.XMessage, claimed bool) {
	ctx := w.jobCtx
	job, err := DecodeJob(m.Values)
	if err != nil {
		w.deadLetters.WithLabelValues("malformed").Inc()
		w.finish(ctx, m.ID, job, finishing{dead: err.Error(), validID: checkID(job.ID) == nil})
		return
	}
	deliveries := int64(1)
	if claimed {
		// XAUTOCLAIM counted this delivery; the pending entry says how
		// many there were.
		var p []redis.XPendingExt
		err := w.retry(ctx, func() error {
			var err error
			p, err = w.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: w.keys.Jobs, Group: w.cfg.Group,
				Start: m.ID, End: m.ID, Count: 1}).Result()
			return err
		})
		if err != nil {
			return
		}
		if len(p) == 1 {
			deliveries = p[0].RetryCount
		}
	}
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
	if poisoned, why := Poisoned(deliveries, w.cfg.MaxDeliveries); poisoned {
		w.deadLetters.WithLabelValues("poison").Inc()
		w.finish(ctx, m.ID, job, finishing{dead: why, validID: true, deliveries: deliveries})
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
	stopRenewing()
	if ctx.Err() != nil {
		return // the drain's grace ended: the answer is the stop's, not the job's
	}
	outcome, why := Judge(status, body)
	switch outcome {
	case Retry:
		w.outcomes.WithLabelValues("retry").Inc()
		return
	case DeadLetter:
		w.deadLetters.WithLabelValues("refused").Inc()
	}
	w.finish(ctx, m.ID, job, finishing{validID: true, answered: true, status: status, body: body, dead: why, deliveries: deliveries})
}

// renew keeps the job's pending entry fresh while it runs (XCLAIM JUSTID
// to itself resets its idle time without counting a delivery), so that
// no worker claims a job that is still running.
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
				w.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: w.keys.Jobs, Group: w.cfg.Group,
					Consumer: w.cfg.Name, Messages: []string{id}})
			}
		}
	}()
	return func() { cancel(); <-done }
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
}

// heartbeatEvery is how often a worker announces itself and reads the
// queue's lengths; its announcement expires after three misses.
const heartbeatEvery = 2 * time.Second

func (w *Worker) workerKey() string { return w.keys.prefix + ":worker:" + w.cfg.Name }

// heartbeat announces the worker and updates the queue's gauges until
// ctx ends.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		a, _ := json.Marshal(announcement{Name: w.cfg.Name, Version: w.cfg.Version, Capacity: w.cfg.Capacity,
			Running: w.running.Load(), Draining: w.draining.Load(), LastSeen: time.Now().UTC()})
		w.rdb.Set(ctx, w.workerKey(), a, 3*heartbeatEvery)
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
	pipe := w.rdb.Pipeline()
	first := pipe.XRangeN(ctx, w.keys.Jobs, "-", "+", 1)
	now := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	if len(first.Val()) == 0 {
		return 0, nil
	}
	return AgeOf(first.Val()[0].ID, now.Val()), nil
}

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
	w.redisUp.Store(false)
	w.outage.Lock()
	if !w.inOutage {
		w.inOutage = true
		w.cfg.Log(fmt.Sprintf("queue: Redis: %v; retrying with backoff, taking no jobs until it answers", err))
	}
	w.outage.Unlock()
	b.wait(ctx)
}

// ok notes a successful Redis command: the outage, if any, is over.
func (w *Worker) ok(b *backoff) {
	w.redisUp.Store(true)
	b.next = firstBackoff
	w.outage.Lock()
	if w.inOutage {
		w.inOutage = false
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

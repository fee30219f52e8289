package main

// --queue-url: the queue front end (package queue), a worker taking jobs
// from a Redis stream and answering each through this service's own
// handlers. Only this binary links go-redis; the one-shot isolate does
// not.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	neturl "net/url"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/isolate-sandbox/isolate/service/caller"
	"github.com/isolate-sandbox/isolate/service/queue"
	"github.com/isolate-sandbox/isolate/service/server"
)

// queueOptions are the queue front end's flags.
type queueOptions struct {
	url, urlFile, prefix, group, name string
	capacity, maxDeliveries           int
	claimIdle, resultTTL              time.Duration
}

func (q *queueOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&q.url, "queue-url", "", "also take jobs from this Redis: redis://[user:pass@]host:port/db, rediss://... (TLS) or unix:///path?db=N (docs/QUEUE.md)")
	fs.StringVar(&q.urlFile, "queue-url-file", "", "file holding the --queue-url (mode 0600: it may hold a password)")
	fs.StringVar(&q.prefix, "queue-prefix", "isolate", "prefix of the queue's Redis keys: PREFIX:jobs, PREFIX:results, PREFIX:dead, PREFIX:result:ID, PREFIX:worker:NAME")
	fs.StringVar(&q.group, "queue-group", "isolate-workers", "consumer group of the jobs stream (created if missing)")
	fs.StringVar(&q.name, "queue-name", "", "this worker's name in the group (default: the host name)")
	fs.IntVar(&q.capacity, "queue-capacity", 0, "jobs this worker runs at once (default --parallel)")
	fs.IntVar(&q.maxDeliveries, "queue-max-deliveries", 3, "a job delivered more often goes to the dead letters")
	fs.DurationVar(&q.claimIdle, "queue-claim-idle", 30*time.Second, "how long a dead worker's job waits before another worker claims it")
	fs.DurationVar(&q.resultTTL, "queue-result-ttl", 24*time.Hour, "how long a job's result is kept")
}

// metrics are the collectors the service's /metrics adds for the queue.
func queueMetrics(w *queue.Worker) []prometheus.Collector {
	if w == nil {
		return nil
	}
	return w.Metrics()
}

// readURL settles the queue's URL: from --queue-url-file when given
// (read as every secret is, server.ReadSecret), and never with a
// placeholder password. Done before the service holds anything.
func (q *queueOptions) readURL() error {
	flag := "--queue-url"
	if q.urlFile != "" {
		if q.url != "" {
			return errors.New("--queue-url and --queue-url-file: give one")
		}
		flag = "--queue-url-file"
		var err error
		if q.url, err = server.ReadSecret(q.urlFile); err != nil {
			return fmt.Errorf("--queue-url-file: %v", err)
		}
	}
	if u, err := neturl.Parse(q.url); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && server.IsPlaceholder(pw) {
			return fmt.Errorf("%s: the Redis password is a placeholder (as the shipped Secret's CHANGE-ME): put the real one", flag)
		}
	}
	return nil
}

// worker makes the queue's worker (nil without --queue-url), answering
// through srv once it is set (readURL first); a job's body is bounded
// by maxBody (--max-body), as a request's.
func (q *queueOptions) worker(parallel int, maxBody int64, srv **server.Server, ready *readiness) (*queue.Worker, error) {
	url := q.url
	if url == "" {
		return nil, nil
	}
	name := q.name
	if name == "" {
		name, _ = os.Hostname()
	}
	capacity := q.capacity
	if capacity <= 0 {
		capacity = parallel
	}
	return queue.New(queue.Config{
		URL: url, Prefix: q.prefix, Group: q.group, Name: name, Version: version,
		Capacity: capacity, ClaimIdle: q.claimIdle, MaxDeliveries: q.maxDeliveries, ResultTTL: q.resultTTL,
		MaxBodyBytes: maxBody,
		Answer: func(ctx context.Context, who caller.Caller, method, path string, body string) (int, []byte) {
			return (*srv).Answer(ctx, who, method, path, body)
		},
		Log: func(line string) { fmt.Fprintln(os.Stderr, "isolate serve: "+line) },
		// The worker reads no job while the self-test fails, hands back
		// one that needs an image not built here, and one whose XX the
		// self-test then blames on this service.
		Ready: func() (bool, []string) {
			imgs, _ := builtImages()
			return ready.Err() == nil, imgs
		},
		Recheck: ready.Recheck,
	})
}

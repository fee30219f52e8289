// Command bench measures the queue front end (not a test): the cost a job
// pays for going through Redis against the same request on the service's
// unix socket (median and p99 of one request at a time), and the
// throughput of a burst with one and two workers against the API's. It
// starts its own redis-server and isolate-serve processes (root), and
// stops them.
//
//	go run ./service/queue/bench -serve bin/isolate-serve [-runs 300] [-burst 400]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/isolate-sandbox/isolate/service/queue"
)

const job = `{"commands":[{"args":["/bin/true"]}]}`

// qkeys are the Redis keys of the service's default prefix.
var qkeys = queue.KeysOf("isolate")

func main() {
	serve := flag.String("serve", "bin/isolate-serve", "the isolate-serve binary")
	runs := flag.Int("runs", 300, "requests one at a time, per path")
	burst := flag.Int("burst", 400, "requests of the throughput burst")
	flag.Parse()
	if err := run(*serve, *runs, *burst); err != nil {
		fmt.Fprintln(os.Stderr, "bench: "+err.Error())
		os.Exit(1)
	}
}

type procs struct{ cmds []*exec.Cmd }

func (p *procs) start(name string, args ...string) error {
	c := exec.Command(name, args...)
	c.Stdout, c.Stderr = nil, nil
	if err := c.Start(); err != nil {
		return err
	}
	p.cmds = append(p.cmds, c)
	return nil
}

// stop stops every process it started, the last first.
func (p *procs) stop() {
	for i := len(p.cmds) - 1; i >= 0; i-- {
		p.cmds[i].Process.Signal(syscall.SIGTERM)
		p.cmds[i].Wait()
	}
	p.cmds = nil
}

func run(serve string, runs, burst int) error {
	dir, err := os.MkdirTemp("", "isolate-queue-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "redis.sock")
	var ps procs
	defer ps.stop()
	if err := ps.start("redis-server", "--port", "0", "--unixsocket", sock, "--dir", dir, "--appendonly", "yes", "--save", ""); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, PoolSize: 64})
	defer rdb.Close()
	ctx := context.Background()
	if err := wait(func() bool { return rdb.Ping(ctx).Err() == nil }); err != nil {
		return err
	}
	startWorkers := func(n, parallel int) ([]*http.Client, error) {
		var clients []*http.Client
		for i := range n {
			api := filepath.Join(dir, fmt.Sprintf("api%d.sock", i))
			if err := ps.start(serve, "--socket", api, "--cli-socket", "none", "--store", filepath.Join(dir, fmt.Sprintf("store%d", i)),
				"--parallel", fmt.Sprint(parallel), "--queue-url", "unix://"+sock, "--queue-name", fmt.Sprintf("bench%d", i)); err != nil {
				return nil, err
			}
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", api)
			}}}
			if err := wait(func() bool { r, err := c.Get("http://isolate/v1/version"); return err == nil && r.Body.Close() == nil }); err != nil {
				return nil, err
			}
			clients = append(clients, c)
		}
		if err := wait(func() bool { n2, _ := rdb.Keys(ctx, "isolate:worker:*").Result(); return len(n2) == n }); err != nil {
			return nil, err
		}
		return clients, nil
	}
	viaAPI := func(c *http.Client) error {
		r, err := c.Post("http://isolate/v1/run", "application/json", strings.NewReader(job))
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			return fmt.Errorf("API: %s", r.Status)
		}
		return nil
	}
	seq := 0
	var seqMu sync.Mutex
	viaQueue := func() error {
		seqMu.Lock()
		seq++
		id := fmt.Sprintf("bench-%d", seq)
		seqMu.Unlock()
		last := "$"
		if m, err := rdb.XRevRangeN(ctx, qkeys.Results, "+", "-", 1).Result(); err == nil && len(m) == 1 {
			last = m[0].ID
		}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: qkeys.Jobs, Values: []string{"id", id, "body", job}}).Err(); err != nil {
			return err
		}
		for {
			if n, _ := rdb.Exists(ctx, qkeys.Result(id)).Result(); n == 1 {
				return nil
			}
			s, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{qkeys.Results, last}, Block: time.Second}).Result()
			if err != nil && err != redis.Nil {
				return err
			}
			for _, st := range s {
				for _, m := range st.Messages {
					last = m.ID
				}
			}
		}
	}

	// One worker, parallel 2: latency one request at a time, then the
	// bursts.
	clients, err := startWorkers(1, 2)
	if err != nil {
		return err
	}
	api := func() error { return viaAPI(clients[0]) }
	for range 20 { // warm both paths
		if err := api(); err != nil {
			return err
		}
		if err := viaQueue(); err != nil {
			return err
		}
	}
	var apiLat, qLat []time.Duration
	for range runs {
		for _, p := range []struct {
			f func() error
			l *[]time.Duration
		}{{api, &apiLat}, {viaQueue, &qLat}} {
			t := time.Now()
			if err := p.f(); err != nil {
				return err
			}
			*p.l = append(*p.l, time.Since(t))
		}
	}
	fmt.Printf("one request at a time, /bin/true, %d each (interleaved):\n", runs)
	fmt.Printf("  %-28s median %7.2f ms  p99 %7.2f ms\n", "unix-socket API", ms(pct(apiLat, 50)), ms(pct(apiLat, 99)))
	fmt.Printf("  %-28s median %7.2f ms  p99 %7.2f ms\n", "queue (XADD to result)", ms(pct(qLat, 50)), ms(pct(qLat, 99)))
	fmt.Printf("  the queue adds %.2f ms at the median\n", ms(pct(qLat, 50)-pct(apiLat, 50)))

	apiRate := throughput(burst, 4, api)
	q1 := throughputQueue(ctx, rdb, burst)
	ps.stop()
	// Two workers, parallel 1 each: the same slots as one of parallel 2.
	rdb2 := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	defer rdb2.Close()
	if err := ps.start("redis-server", "--port", "0", "--unixsocket", sock, "--dir", dir, "--appendonly", "yes", "--save", ""); err != nil {
		return err
	}
	if err := wait(func() bool { return rdb2.Ping(ctx).Err() == nil }); err != nil {
		return err
	}
	rdb2.Del(ctx, "isolate:worker:bench0")
	if _, err := startWorkers(2, 1); err != nil {
		return err
	}
	q2 := throughputQueue(ctx, rdb2, burst)
	fmt.Printf("throughput, a burst of %d /bin/true:\n", burst)
	fmt.Printf("  %-40s %7.1f runs/s\n", "unix-socket API, parallel 2, 4 clients", apiRate)
	fmt.Printf("  %-40s %7.1f runs/s (%.0f %% of the API)\n", "queue, 1 worker of parallel 2", q1, 100*q1/apiRate)
	fmt.Printf("  %-40s %7.1f runs/s (%.0f %% of the API)\n", "queue, 2 workers of parallel 1", q2, 100*q2/apiRate)
	return nil
}

// throughput runs n requests with c at once: runs per second.
func throughput(n, c int, f func() error) float64 {
	var wg sync.WaitGroup
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	t := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				f()
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(t).Seconds()
}

// throughputQueue queues n jobs at once and waits for the last result.
func throughputQueue(ctx context.Context, rdb *redis.Client, n int) float64 {
	prefix := fmt.Sprintf("burst-%d-", time.Now().UnixNano())
	t := time.Now()
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: qkeys.Jobs, Values: []string{"id", prefix + fmt.Sprint(i), "body", job}})
	}
	pipe.Exec(ctx)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = qkeys.Result(prefix + fmt.Sprint(i))
	}
	for {
		if c, _ := rdb.Exists(ctx, keys...).Result(); c == int64(n) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	return float64(n) / time.Since(t).Seconds()
}

func wait(cond func() bool) error {
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out starting")
		}
	}
	return nil
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

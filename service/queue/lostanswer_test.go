package queue

// Commands whose answer Redis never sent: Redis ran them and the
// connection closed before the answer arrived, as when Redis stops
// mid-command. A worker's XREADGROUP: the job must still get its result,
// from the worker it is pending for, whose announcement stays live all
// along. A hand-back: the job must be in the stream once, not once more
// for each try.

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/isolate-sandbox/isolate/service/caller"
)

// answerLosingProxy forwards connections on its own unix socket to
// Redis's. Armed with a command name, it passes the next such command to
// Redis, waits until ran says Redis has run it, and closes that
// connection without passing the answer on.
type answerLosingProxy struct {
	ln     net.Listener
	target string
	ran    func() bool

	mu    sync.Mutex
	armed []byte
	lost  chan struct{} // closed when an answer has been dropped
}

func newAnswerLosingProxy(t *testing.T, sock, target string) *answerLosingProxy {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &answerLosingProxy{ln: ln, target: target, lost: make(chan struct{})}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { defer conns.Done(); p.serve(c) }()
		}
	}()
	return p
}

// arm makes the proxy lose the answer of the next command that holds
// name, once ran tells that Redis ran it.
func (p *answerLosingProxy) arm(name string, ran func() bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.ran = []byte(name), ran
}

func (p *answerLosingProxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("unix", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	var mu sync.Mutex
	dropping := false
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if err != nil {
				client.Close()
				return
			}
			mu.Lock()
			drop := dropping
			mu.Unlock()
			if !drop {
				if _, err := client.Write(buf[:n]); err != nil {
					return
				}
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		hit := p.armed != nil && bytes.Contains(bytes.ToUpper(buf[:n]), p.armed)
		ran := p.ran
		if hit {
			p.armed = nil
		}
		p.mu.Unlock()
		if hit {
			// (The worker's connection carries one command at a time:
			// every earlier answer has been passed on.)
			mu.Lock()
			dropping = true
			mu.Unlock()
		}
		if _, err := server.Write(buf[:n]); err != nil {
			return
		}
		if hit {
			for deadline := time.Now().Add(30 * time.Second); !ran() && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			close(p.lost)
			return
		}
	}
}

// lostRig is a test's Redis, the proxy the worker reaches it through,
// and a client of the test's own.
type lostRig struct {
	dir   string
	rdb   *redis.Client
	proxy *answerLosingProxy
	keys  Keys
}

const lostGroup, lostWorker = "lost-workers", "w"

func newLostRig(t *testing.T) *lostRig {
	t.Helper()
	dir := t.TempDir()
	r := &redisServer{dir: dir, sock: filepath.Join(dir, "redis.sock")}
	t.Cleanup(r.stop)
	startRedis(t, r)
	g := &lostRig{dir: dir, rdb: redis.NewClient(&redis.Options{Network: "unix", Addr: r.sock}), keys: KeysOf("lost")}
	t.Cleanup(func() { g.rdb.Close() })
	if err := g.rdb.XGroupCreateMkStream(context.Background(), g.keys.Jobs, lostGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	g.proxy = newAnswerLosingProxy(t, filepath.Join(dir, "proxy.sock"), r.sock)
	return g
}

// pending is how many entries are pending for the worker.
func (g *lostRig) pending() int {
	p, err := g.rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: g.keys.Jobs, Group: lostGroup,
		Start: "-", End: "+", Count: 10, Consumer: lostWorker}).Result()
	if err != nil {
		return -1
	}
	return len(p)
}

// startWorker runs a worker of cfg (its URL, names and claim time
// filled in) through the proxy until the test ends; its log is log.
func (g *lostRig) startWorker(t *testing.T, cfg Config, log *lockedBuffer) {
	t.Helper()
	cfg.URL, cfg.Prefix, cfg.Group, cfg.Name = "unix://"+filepath.Join(g.dir, "proxy.sock"), "lost", lostGroup, lostWorker
	cfg.Capacity, cfg.ClaimIdle = 1, 300*time.Millisecond
	cfg.Log = func(s string) { log.Write([]byte(s + "\n")) }
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	running := make(chan struct{})
	go func() { w.Run(ctx); close(running) }()
	t.Cleanup(func() {
		stop()
		w.Drain(5 * time.Second)
		<-running
		if t.Failed() {
			t.Logf("worker's log:\n%s", log)
		}
	})
}

// TestLostReadAnswer: the job Redis delivered to a worker whose answer
// was lost is run by that worker and answered, once idle past the claim
// time, though its worker stays announced (no other worker would ever
// claim it).
func TestLostReadAnswer(t *testing.T) {
	g := newLostRig(t)
	ctx := context.Background()
	g.proxy.arm("XREADGROUP", func() bool { return g.pending() == 1 })
	if err := g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", "job-1", "body", `{}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	answered := make(chan struct{}, 16)
	g.startWorker(t, Config{Answer: func(context.Context, caller.Caller, string, string, string) (int, []byte) {
		answered <- struct{}{}
		return http.StatusOK, []byte(`{"status":"OK"}`)
	}}, &lockedBuffer{})

	<-g.proxy.lost
	waitFor(t, "the job whose delivery was lost has its result", func() bool {
		return g.rdb.Exists(ctx, g.keys.Result("job-1")).Val() == 1
	})
	if got := g.rdb.HGet(ctx, g.keys.Result("job-1"), "status").Val(); got != "200" {
		t.Errorf("the result's status is %q, want 200", got)
	}
	if n := len(answered); n != 1 {
		t.Errorf("the job ran %d times, want once", n)
	}
	if p := g.rdb.XPending(ctx, g.keys.Jobs, lostGroup).Val(); p.Count != 0 {
		t.Errorf("%d jobs left pending", p.Count)
	}
}

// TestLostHandBackAnswer: a job handed back (this worker lacks its image,
// another live worker announces it) whose hand-back Redis ran but whose
// answer was lost is in the stream once after the worker tries again.
func TestLostHandBackAnswer(t *testing.T) {
	g := newLostRig(t)
	ctx := context.Background()
	other, _ := json.Marshal(announcement{Name: "other", Ready: true, Images: &[]string{"python"}})
	if err := g.rdb.Set(ctx, "lost:worker:other", other, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.Jobs, Values: []string{"id", "job-1", "endpoint", "exec",
		"body", `{"lang":"python","source":"print(1)"}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	// The hand-back script names the job's handed_back field; it has run
	// once nothing is pending for the worker any more. (Loaded first, so
	// that the answer lost is that of the script run, not of a NOSCRIPT.)
	if err := handBackScript.Load(ctx, g.rdb).Err(); err != nil {
		t.Fatal(err)
	}
	g.proxy.arm("HANDED_BACK", func() bool { return g.pending() == 0 })
	log := &lockedBuffer{}
	g.startWorker(t, Config{
		Ready: func() (bool, []string) { return true, []string{} },
		Answer: func(context.Context, caller.Caller, string, string, string) (int, []byte) {
			t.Error("the worker ran a job whose image it lacks")
			return http.StatusOK, []byte(`{"status":"OK"}`)
		}}, log)
	<-g.proxy.lost
	waitFor(t, "the worker logs the hand-back", func() bool {
		return strings.Contains(log.String(), "handed back for another worker")
	})
	// (The worker goes on handing the job back, each time in one script:
	// the count holds whenever it is read.)
	entries := g.rdb.XRange(ctx, g.keys.Jobs, "-", "+").Val()
	if len(entries) != 1 {
		t.Fatalf("the stream holds %d entries after the hand-back, want 1: %v", len(entries), entries)
	}
	if got := entries[0].Values["id"]; got != "job-1" {
		t.Errorf("the entry is job %v, want job-1", got)
	}
}

package queue

// A delivery whose answer Redis never sent: Redis ran the worker's
// XREADGROUP (the job is pending for the worker) and the connection
// closed before the answer arrived, as when Redis stops mid-command. The
// job must still get its result, from the worker it is pending for,
// whose announcement stays live all along.

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/isolate-sandbox/isolate/caller"
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
			for !ran() {
				time.Sleep(10 * time.Millisecond)
			}
			close(p.lost)
			return
		}
	}
}

// TestLostReadAnswer: the job Redis delivered to a worker whose answer
// was lost is run by that worker and answered, once idle past the claim
// time, though its worker stays announced (no other worker would ever
// claim it).
func TestLostReadAnswer(t *testing.T) {
	dir := t.TempDir()
	r := &redisServer{dir: dir, sock: filepath.Join(dir, "redis.sock")}
	t.Cleanup(r.stop)
	startRedis(t, r)
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: r.sock})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	keys := KeysOf("lost")
	const group, name = "lost-workers", "w"
	if err := rdb.XGroupCreateMkStream(ctx, keys.Jobs, group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	proxy := newAnswerLosingProxy(t, filepath.Join(dir, "proxy.sock"), r.sock)
	pendingHere := func() bool {
		p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: keys.Jobs, Group: group,
			Start: "-", End: "+", Count: 10, Consumer: name}).Result()
		return err == nil && len(p) == 1
	}
	proxy.arm("XREADGROUP", pendingHere)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Jobs, Values: []string{"id", "job-1", "body", `{}`}}).Err(); err != nil {
		t.Fatal(err)
	}

	answered := make(chan struct{}, 16)
	log := &lockedBuffer{}
	w, err := New(Config{URL: "unix://" + filepath.Join(dir, "proxy.sock"), Prefix: "lost", Group: group, Name: name,
		Capacity: 1, ClaimIdle: 300 * time.Millisecond,
		Answer: func(context.Context, caller.Caller, string, string, string) (int, []byte) {
			answered <- struct{}{}
			return http.StatusOK, []byte(`{"status":"OK"}`)
		},
		Log: func(s string) { log.Write([]byte(s + "\n")) }})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	running := make(chan struct{})
	go func() { w.Run(runCtx); close(running) }()
	t.Cleanup(func() {
		stop()
		w.Drain(5 * time.Second)
		<-running
		if t.Failed() {
			t.Logf("worker's log:\n%s", log)
		}
	})

	<-proxy.lost
	waitFor(t, "the job whose delivery was lost has its result", func() bool {
		return rdb.Exists(ctx, keys.Result("job-1")).Val() == 1
	})
	if got := rdb.HGet(ctx, keys.Result("job-1"), "status").Val(); got != "200" {
		t.Errorf("the result's status is %q, want 200", got)
	}
	if n := len(answered); n != 1 {
		t.Errorf("the job ran %d times, want once", n)
	}
	if p := rdb.XPending(ctx, keys.Jobs, group).Val(); p.Count != 0 {
		t.Errorf("%d jobs left pending", p.Count)
	}
}

package queue

// A job's fields are bounded before they are read: an in-process worker
// on a real redis-server.

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/isolate-sandbox/isolate/service/caller"
)

// A job whose body is past the worker's bound (--max-body) is a dead
// letter that says so, its result too, and is never read: the worker
// allocates far less than the body while it deals with it. The job
// after it is answered.
func TestJobPastMaxBodyIsADeadLetterUnread(t *testing.T) {
	dir := t.TempDir()
	r := &redisServer{dir: dir, sock: filepath.Join(dir, "redis.sock")}
	t.Cleanup(r.stop)
	startRedis(t, r)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: r.sock})
	defer rdb.Close()
	keys := KeysOf("isolate")
	const bigBytes = 32 << 20
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Jobs, Values: []string{"id", "big", "body", strings.Repeat(" ", bigBytes)}})
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Jobs, Values: []string{"id", "small", "body", `{"commands": []}`}})
	var mu sync.Mutex
	var asked []string
	w, err := New(Config{URL: "unix://" + r.sock, Name: "w0", MaxBodyBytes: 1 << 20,
		Answer: func(_ context.Context, _ caller.Caller, _, path, body string) (int, []byte) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, body)
			return 200, []byte(`{"results": []}`)
		}})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	wctx, stop := context.WithCancel(ctx)
	go w.Run(wctx)
	waitFor(t, "both jobs to have results", func() bool {
		return rdb.Exists(ctx, keys.Result("big"), keys.Result("small")).Val() == 2
	})
	runtime.ReadMemStats(&after)
	stop()
	w.Drain(5 * time.Second)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > bigBytes/4 {
		t.Errorf("the worker allocated %d bytes while it refused a job of %d it does not read", grew, bigBytes)
	}
	res := rdb.HGetAll(ctx, keys.Result("big")).Val()
	if !strings.Contains(res["dead_letter"], "field body of the job is 33554432 bytes") || !strings.Contains(res["dead_letter"], "--max-body") {
		t.Errorf("the big job's result: %q", res["dead_letter"])
	}
	dead := rdb.XRange(ctx, keys.Dead, "-", "+").Val()
	if len(dead) != 1 || dead[0].Values["id"] != "big" || !strings.Contains(dead[0].Values["reason"].(string), "--max-body") {
		t.Errorf("dead letters: %d %v", len(dead), dead)
	}
	if len(asked) != 1 || asked[0] != `{"commands": []}` {
		t.Errorf("the service was asked %d jobs, want the small one only", len(asked))
	}
	if n := rdb.XLen(ctx, keys.Jobs).Val(); n != 0 {
		t.Errorf("%d jobs left in the stream", n)
	}
}

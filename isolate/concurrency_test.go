package isolate_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
)

// Many runs at once in one process (the service's case) share its
// descriptor table, its box locks and the cgroup tree: a descriptor closed
// twice, or by a finalizer while its number is in use, would be reused by
// another run's lock or socket, and a sweep could then take a running
// box's lock and remove its cgroup. Every run must be OK, nothing left
// open. (The XX results once seen under load, "read CPU usage: ... no
// such device", came from another process on the host that ignores the
// locks: an isolate built before them, see cgroupReadErr.)
func TestRunManyConcurrently(t *testing.T) {
	needRoot(t)
	n := 2000
	if v := os.Getenv("ISOLATE_RACE_RUNS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	h := newHost(t)
	// One run first: the runtime's poller and the host's own descriptors
	// (the small init's memfd) are made once, on the first run, and are
	// not a run's to close. Its seccomp listener closes just after Run
	// returns (Recorder.Stop): count once that is done.
	if rep, err := h.Run(context.Background(), &api.Spec{Args: []string{"/bin/true"}}, isolate.IO{}); err != nil || rep.Status != api.StatusOK {
		t.Fatalf("first run: %v %+v", err, rep)
	}
	fdsBefore := settledFDs(t)
	var next, failed atomic.Int64
	var mu sync.Mutex
	messages := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				spec := &api.Spec{Args: []string{"/bin/sh", "-c", "echo $$"}}
				rep, err := h.Run(context.Background(), spec, isolate.IO{Stdin: strings.NewReader("x")})
				msg := ""
				switch {
				case err != nil:
					msg = err.Error()
				case rep.Status != api.StatusOK || rep.Stdout == "":
					msg = string(rep.Status) + ": " + rep.Message + " stdout " + strconv.Quote(rep.Stdout)
				}
				if msg != "" {
					failed.Add(1)
					mu.Lock()
					messages[msg]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for msg, k := range messages {
		t.Errorf("%d× %s", k, msg)
	}
	if failed.Load() > 0 {
		t.Fatalf("%d of %d runs failed", failed.Load(), n)
	}
	// A run's stdin copier may still be closing its pipe end when Run
	// returns (the program need not read its input): let it finish.
	after := openFDs(t)
	for i := 0; i < 100 && after != fdsBefore; i++ {
		time.Sleep(20 * time.Millisecond)
		after = openFDs(t)
	}
	if after != fdsBefore {
		t.Errorf("%d descriptors open before the runs, %d after", fdsBefore, after)
	}
}

// settledFDs is openFDs once two counts 20 ms apart agree (at most 2 s):
// descriptors a finished run closes in the background are gone by then.
func settledFDs(t *testing.T) int {
	n := openFDs(t)
	for i := 0; i < 100; i++ {
		time.Sleep(20 * time.Millisecond)
		m := openFDs(t)
		if m == n {
			break
		}
		n = m
	}
	return n
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

package isolate

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// The pool's housekeeping waits for quietFor after the last claim or
// answer, and however often they come, for maxDefer at most. (Lower
// bounds only: a loaded machine may always wake it later.)
func TestHousekeepingWaitsForQuiet(t *testing.T) {
	p := &pool{stop: make(chan struct{})}
	p.busyAt = time.Now()
	start := time.Now()
	p.awaitQuiet()
	if waited := time.Since(start); waited < quietFor/2 {
		t.Errorf("waited %v after a claim, want about %v", waited, quietFor)
	}

	// Claims all the time: never quiet, so maxDefer it is.
	p.busyAt = time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			p.mu.Lock()
			p.busyAt = time.Now()
			p.mu.Unlock()
			select {
			case <-done:
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	start = time.Now()
	p.awaitQuiet()
	waited := time.Since(start)
	close(done)
	wg.Wait()
	if waited < maxDefer {
		t.Errorf("waited %v under a stream of claims, want maxDefer (%v)", waited, maxDefer)
	}
}

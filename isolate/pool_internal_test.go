package isolate

import (
	"testing"
	"time"
)

// The pool's housekeeping waits for quietFor after the last claim or
// answer, and while claims keep coming (busyAt always ahead), for
// maxDefer at most: it returns. (Lower bounds only: a sleep never ends
// early, while a loaded machine may always wake it later.)
func TestHousekeepingWaitsForQuiet(t *testing.T) {
	p := &pool{stop: make(chan struct{})}
	start := time.Now()
	p.busyAt = start
	p.awaitQuiet()
	if waited := time.Since(start); waited < quietFor {
		t.Errorf("waited %v after a claim, want about %v", waited, quietFor)
	}

	start = time.Now()
	p.busyAt = start.Add(time.Hour)
	p.awaitQuiet()
	if waited := time.Since(start); waited < maxDefer {
		t.Errorf("waited %v while never quiet, want maxDefer (%v)", waited, maxDefer)
	}
}

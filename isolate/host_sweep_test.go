package isolate

import (
	"testing"
	"time"
)

// A one-shot run's Host sweeps at its first box; a long-lived one at most
// once per sweepInterval, however many boxes it makes.
func TestSweepDueSpacesSweeps(t *testing.T) {
	h := &Host{}
	now := time.Now()
	if !h.sweepDue(now) {
		t.Fatal("a Host's first box did not sweep")
	}
	if h.sweepDue(now) || h.sweepDue(now.Add(sweepInterval-time.Millisecond)) {
		t.Fatal("a box made within sweepInterval of a sweep swept again")
	}
	if !h.sweepDue(now.Add(sweepInterval)) {
		t.Fatal("no sweep once sweepInterval had passed")
	}
	h.lastSweep.Store(now.UnixNano())
	swept := 0
	for i := 0; i < 8; i++ { // boxes made at once by several runs
		if h.sweepDue(now.Add(sweepInterval + time.Second)) {
			swept++
		}
	}
	if swept != 1 {
		t.Fatalf("%d of 8 boxes made at once swept, want 1", swept)
	}
}

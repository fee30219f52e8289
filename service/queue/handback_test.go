package queue

import (
	"testing"
	"time"
)

// A job handed back again waits 100 ms per earlier hand-back, at most
// 5 s (docs/QUEUE.md).
func TestHandBackPause(t *testing.T) {
	for _, tc := range []struct {
		handedBack int
		want       time.Duration
	}{{0, 0}, {1, 100 * time.Millisecond}, {3, 300 * time.Millisecond}, {50, 5 * time.Second}, {100, 5 * time.Second}} {
		if got := handBackPause(tc.handedBack); got != tc.want {
			t.Errorf("after %d hand-backs: %v, want %v", tc.handedBack, got, tc.want)
		}
	}
}

package isolate

import (
	"os"
	"testing"
)

func TestThrashDetector(t *testing.T) {
	const limit = 256 << 20
	page := int64(os.Getpagesize())
	heavy := int64(limit/40)/page + 1 // refaulted pages per tick that count
	for _, c := range []struct {
		name  string
		usage int64
		step  int64 // refaulted pages per tick
		ticks int
		want  bool
	}{
		{"thrashing for the whole window", limit - 4096, heavy, thrashTicks + 1, true},
		{"one tick short", limit - 4096, heavy, thrashTicks, false},
		{"below the limit", limit - limit/16, heavy, 3 * thrashTicks, false},
		{"at the limit without refaults", limit, 0, 3 * thrashTicks, false},
		{"a few refaults", limit, heavy / 4, 3 * thrashTicks, false},
	} {
		d := newThrashDetector(limit)
		got := false
		// The first reading only sets the baseline.
		for i, refaults := 0, int64(1000); i < c.ticks; i, refaults = i+1, refaults+c.step {
			got = d.thrashing(c.usage, refaults)
		}
		if got != c.want {
			t.Errorf("%s: thrashing = %v, want %v", c.name, got, c.want)
		}
	}
	// A tick below the limit starts the window again.
	d := newThrashDetector(limit)
	refaults := int64(0)
	for i := 0; i < thrashTicks; i++ {
		d.thrashing(limit, refaults)
		refaults += heavy
	}
	d.thrashing(limit/2, refaults)
	for i := 0; i < thrashTicks-1; i++ {
		refaults += heavy
		if d.thrashing(limit, refaults) {
			t.Fatalf("thrashing after %d ticks past a tick below the limit", i+1)
		}
	}
}

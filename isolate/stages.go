package isolate

import "time"

// stageTimer records how long each step of a run took, for the report's
// setup/teardown figures and `isolate bench`'s breakdown.
type stageTimer struct {
	start  time.Time
	last   time.Time
	stages map[string]float64
}

func newStageTimer() stageTimer {
	now := time.Now()
	return stageTimer{start: now, last: now, stages: map[string]float64{}}
}

// mark ends the stage called name.
func (t *stageTimer) mark(name string) { t.markAt(name, time.Now()) }

// markAt ends the stage called name at a moment already past (not
// before the last stage's end).
func (t *stageTimer) markAt(name string, at time.Time) {
	if at.Before(t.last) {
		at = t.last
	}
	t.stages[name] += at.Sub(t.last).Seconds()
	t.last = at
}

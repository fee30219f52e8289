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
func (t *stageTimer) mark(name string) {
	now := time.Now()
	t.stages[name] += now.Sub(t.last).Seconds()
	t.last = now
}

// since0 is the time since the run began, in seconds.
func (t *stageTimer) since0() float64 { return time.Since(t.start).Seconds() }

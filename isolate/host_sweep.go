package isolate

import "time"

// sweepInterval spaces a long-lived Host's sweeps. Listing every box
// cgroup and trying each one's lock before every box was 5-6 % of a
// service's CPU; what a killed one-shot run leaves waits this long at
// most (a box's own stale cgroup goes when the box is made: cgroup.Create).
const sweepInterval = 5 * time.Second

// SweepStale removes the box cgroups no run holds. A service calls this
// when it starts, so that what a killed predecessor left goes at once,
// not at the first request.
func (h *Host) SweepStale() error {
	m, err := h.Cgroups()
	if err != nil {
		return err
	}
	h.lastSweep.Store(time.Now().UnixNano())
	if m != nil {
		sweepStale(m, h.lockDir(), -1)
	}
	return nil
}

// sweepDue tells whether a box made now sweeps first: the first of a
// Host (a one-shot run's only one), then one every sweepInterval.
func (h *Host) sweepDue(now time.Time) bool {
	last := h.lastSweep.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < sweepInterval {
		return false
	}
	return h.lastSweep.CompareAndSwap(last, now.UnixNano())
}

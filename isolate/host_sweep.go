package isolate

// SweepStale removes the box cgroups no run holds. Every run sweeps
// before it makes its own; a service calls this when it starts, so that
// what a killed predecessor left goes at once, not at the first request.
func (h *Host) SweepStale() error {
	m, err := h.Cgroups()
	if err != nil {
		return err
	}
	sweepStale(m, -1)
	return nil
}

package caller

import (
	"fmt"

	"github.com/isolate-sandbox/isolate/api"
)

// Caps are the service's maxima for what a request may ask (0: no cap).
// A request beyond one is a 400 naming the field; a request that leaves
// a capped limit at its default gets the cap when the default is larger
// (or none).
type Caps struct {
	CPUTimeMs        int64
	WallTimeMs       int64
	MemoryBytes      int64
	Pids             int64
	TmpSizeBytes     int64
	FileSizeBytes    int64
	OutputLimitBytes int64
	CPUs             float64 // CPU bandwidth (--max-cpus)
	Commands         int     // commands in one request (also bounded by --parallel)
}

// fields lists each capped field: its name, the cap, and the field.
func (c Caps) fields(s *api.Spec) []struct {
	name string
	max  int64
	v    *int64
} {
	return []struct {
		name string
		max  int64
		v    *int64
	}{
		{"cpu_time_ms", c.CPUTimeMs, &s.CPUTimeMs},
		{"wall_time_ms", c.WallTimeMs, &s.WallTimeMs},
		{"memory_bytes", c.MemoryBytes, &s.MemoryBytes},
		{"pids", c.Pids, &s.Pids},
		{"tmp_size_bytes", c.TmpSizeBytes, &s.TmpSizeBytes},
		{"file_size_bytes", c.FileSizeBytes, &s.FileSizeBytes},
		{"output_limit_bytes", c.OutputLimitBytes, &s.OutputLimitBytes},
	}
}

// apply checks s against the caps and sets capped defaults; prefix is the
// spec's path in the request.
func (c Caps) apply(s *api.Spec, prefix string) error {
	withDefaults := s.WithDefaults()
	eff := c.fields(&withDefaults)
	for i, f := range c.fields(s) {
		if f.max <= 0 {
			continue
		}
		v := *eff[i].v
		if v != api.Unlimited && v != 0 && v <= f.max {
			continue
		}
		if *f.v == 0 { // the default is beyond the cap (or none): the cap
			*f.v = f.max
			continue
		}
		shown := fmt.Sprint(v)
		if v == api.Unlimited {
			shown = "unlimited"
		}
		return &api.FieldError{Field: prefix + f.name, Msg: fmt.Sprintf("%s is beyond this service's maximum %d", shown, f.max)}
	}
	// The CPU time a run may take before it is killed is within the
	// cap: time and extra time together.
	if c.CPUTimeMs > 0 && s.ExtraTimeMs > 0 && s.CPUTimeMs+s.ExtraTimeMs > c.CPUTimeMs {
		return &api.FieldError{Field: prefix + "extra_time_ms", Msg: fmt.Sprintf("%d: cpu_time_ms and extra_time_ms together (%d) are beyond this service's maximum %d", s.ExtraTimeMs, s.CPUTimeMs+s.ExtraTimeMs, c.CPUTimeMs)}
	}
	if c.CPUs > 0 {
		if s.CPUs == 0 {
			s.CPUs = c.CPUs
		} else if s.CPUs > c.CPUs {
			return &api.FieldError{Field: prefix + "cpus", Msg: fmt.Sprintf("%g is beyond this service's maximum %g", s.CPUs, c.CPUs)}
		}
	}
	return nil
}

// Max is each capped field's cap, by its request field name (a field
// without a cap is absent).
func (c Caps) Max() map[string]int64 {
	m := map[string]int64{}
	for _, f := range c.fields(&api.Spec{}) {
		if f.max > 0 {
			m[f.name] = f.max
		}
	}
	if c.Commands > 0 {
		m["commands"] = int64(c.Commands)
	}
	return m
}

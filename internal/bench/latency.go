package bench

import (
	"fmt"
	"strings"

	"github.com/isolate-sandbox/isolate/isolate"
)

// warmupRounds are run and thrown away before the measured rounds: the
// first runs pay for cold caches (page cache of the binaries, dentries,
// the first cgroup of a parent) that a busy judge does not.
const warmupRounds = 5

// VariantResult is the latency of one variant over the rounds.
type VariantResult struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`
	// WallMs is the wall time from fork to reaping, in milliseconds.
	WallMs dist `json:"wall_ms"`
	// CPUMs is the CPU time (user + system) of the command and all it
	// reaped, in milliseconds: with N CPUs, no more than N / CPUMs runs
	// can finish per millisecond.
	CPUMs dist `json:"cpu_ms"`
	// RatioToBwrap is median / bwrap's median (0: bwrap did not run).
	RatioToBwrap float64 `json:"ratio_to_bwrap"`
	// RatioToBare is median / a bare exec's median (handover bench only).
	RatioToBare float64 `json:"ratio_to_bare,omitempty"`
	// Skipped says why the variant did not run on this host.
	Skipped string `json:"skipped,omitempty"`
}

// latencySamples is what the interleaved rounds collected.
type latencySamples struct {
	wall    map[string][]float64 // ms per variant
	cpu     map[string][]float64 // ms per variant
	reports []*isolate.Report
	outside []float64 // ms of each isolate run, matching reports
}

// latency runs rounds interleaved rounds of every variant, each round in
// a fresh random order (r.order), so that none always runs first or
// right after isolate's teardown (whose asynchronous kernel work, such as
// freeing a network namespace, lands on whatever runs next).
func (r *benchRunner) latency(rounds int, vs []variant) (*latencySamples, error) {
	out, err := newSink()
	if err != nil {
		return nil, err
	}
	defer out.Close()
	s := &latencySamples{wall: map[string][]float64{}, cpu: map[string][]float64{}}
	for round := -warmupRounds; round < rounds; round++ {
		for _, i := range r.order.next(len(vs)) {
			v := vs[i]
			var took sample
			var rep *isolate.Report
			var err error
			switch {
			case v.run != nil:
				took, err = v.run(out)
			case v.isolate:
				took, rep, err = r.isolateTrue(out)
			default:
				took, err = timed(v.argv, nil, nil)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.name, err)
			}
			if round < 0 {
				continue
			}
			s.wall[v.name] = append(s.wall[v.name], ms(took.wall))
			s.cpu[v.name] = append(s.cpu[v.name], ms(took.cpu))
			if v.isolate {
				s.reports = append(s.reports, rep)
				s.outside = append(s.outside, ms(took.wall))
			}
		}
	}
	return s, nil
}

// variantResults summarises the rounds per variant, in the order given,
// with each one's ratio to bwrap.
func variantResults(s *latencySamples, vs []variant, skipped map[string]string) []VariantResult {
	bwrap := median(s.wall[VarBwrap])
	var res []VariantResult
	for _, v := range vs {
		sum := summarize(s.wall[v.name])
		cmd := v.argv
		if strings.HasPrefix(v.name, "isolate") {
			// Shown as a user types it, not as the bench starts it.
			cmd = append([]string{"isolate"}, v.argv[1:]...)
		}
		res = append(res, VariantResult{Name: v.name, Command: cmd, WallMs: sum, CPUMs: summarize(s.cpu[v.name]), RatioToBwrap: ratio(sum.Median, bwrap)})
	}
	for _, name := range []string{VarBwrap, VarUnshare, VarIOI, VarIOICg, VarGoJudge} {
		if why, ok := skipped[name]; ok {
			res = append(res, VariantResult{Name: name, Skipped: why})
		}
	}
	return res
}

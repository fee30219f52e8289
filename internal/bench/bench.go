// Package bench is `isolate bench`'s harness: what a sandboxed run costs
// against a bare exec, bwrap and unshare, where isolate's time goes, how
// runs scale on two CPUs, and (with --precision) how exactly limits and
// accounting hold. Benchmarks, never assertions: the targets are printed
// as met or missed.
package bench

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Result is everything one `isolate bench` measured.
type Result struct {
	Machine    machineInfo       `json:"machine"`
	Rounds     int               `json:"rounds"`
	Latency    []VariantResult   `json:"latency"`
	Stages     []StageResult     `json:"stages"`
	Throughput *throughputResult `json:"throughput"`
	Precision  *precisionResult  `json:"precision,omitempty"`
	Targets    []targetResult    `json:"targets"`
}

// targetResult is one of the bench's targets against its measured value.
type targetResult struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Target string  `json:"target"`
	Met    bool    `json:"met"`
}

// Config is what `isolate bench` measures, and with which binary.
type Config struct {
	Bin, Version  string // the isolate binary to start, and its version
	Rounds        int    // interleaved rounds of the latency variants
	Precision     bool   // also measure limits' overshoot and accounting error
	PrecisionRuns int    // runs per precision benchmark
	Peers         Peers  // other sandboxes measured in the same rounds
	Seed          uint64 // the running order's seed
}

// Run measures everything: rounds of the latency variants, the stage
// breakdown, throughput and, if asked, precision.
func Run(c Config) (*Result, error) {
	r := &benchRunner{bin: c.Bin, version: c.Version, env: oneShotEnv(), peers: c.Peers, order: newOrder(c.Seed)}
	return r.bench(c.Rounds, c.Precision, c.PrecisionRuns)
}

// progress tells a person at a terminal what the bench is doing; pipes
// and tests get only the results.
func progress(format string, a ...any) {
	if _, err := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS); err == nil {
		fmt.Fprintf(os.Stderr, "isolate bench: "+format+"\n", a...)
	}
}

// bench measures everything: latency rounds, stage breakdown, throughput
// and, if asked, precision.
func (r *benchRunner) bench(rounds int, precision bool, precRuns int) (*Result, error) {
	res := &Result{Machine: describeMachine(r.version, r.order.seed), Rounds: rounds}
	meter := newCPUMeter()
	vs, skipped := r.variants()
	ps, err := r.peers.peers()
	if err != nil {
		return nil, err
	}
	defer ps.close()
	vs = append(vs, ps.vs...)
	for name, why := range ps.skipped {
		skipped[name] = why
	}
	progress("%d interleaved rounds of %d variants", rounds, len(vs))
	samples, err := r.latency(rounds, vs)
	if err != nil {
		return nil, err
	}
	res.Latency = variantResults(samples, vs, skipped)
	res.Stages = stageBreakdown(samples.reports, samples.outside)
	perBlock := rounds / 4
	if perBlock < 10 {
		perBlock = 10
	}
	progress("throughput: %d turns of blocks of %d runs, 1 and 2 at a time, in a random order each turn", ThroughputBlocks, perBlock)
	if res.Throughput, err = r.throughput(perBlock); err != nil {
		return nil, err
	}
	if precision {
		progress("precision: %d runs per benchmark", precRuns)
		if res.Precision, err = r.precision(precRuns); err != nil {
			return nil, err
		}
	}
	res.Targets = targets(res)
	res.Machine.OtherCPUs = meter.others()
	return res, nil
}

// targets checks the one-shot run's targets against the results.
func targets(res *Result) []targetResult {
	var ts []targetResult
	for _, v := range res.Latency {
		if v.Name == VarIsolate && v.RatioToBwrap > 0 {
			ts = append(ts, targetResult{Name: "isolate run median / bwrap median", Value: v.RatioToBwrap, Target: "≤ 1.00", Met: v.RatioToBwrap <= 1.0})
		}
	}
	var plain, allowlist float64
	for _, v := range res.Latency {
		switch v.Name {
		case VarIsolate:
			plain = v.WallMs.Median
		case varAllowlist:
			allowlist = v.WallMs.Median
		}
	}
	if plain > 0 && allowlist > 0 {
		d := allowlist - plain
		ts = append(ts, targetResult{Name: "a network allowlist's cost, median (ms)", Value: d, Target: "≤ 1.0", Met: d <= 1.0})
	}
	st := stageMedian(res.Stages, StageSetupTeardown)
	ts = append(ts, targetResult{Name: "setup_time + teardown_time, median (ms)", Value: st, Target: "≤ 1.5", Met: st <= 1.5})
	if t := res.Throughput; t != nil {
		ts = append(ts, targetResult{Name: "throughput 2 parallel / 1", Value: t.Ratio, Target: "≥ 1.6", Met: t.Ratio >= 1.6})
	}
	if p := res.Precision; p != nil {
		worst := 0.0
		for _, row := range p.CPULimit {
			worst = max(worst, row.Ms.Max)
		}
		ts = append(ts, targetResult{Name: "CPU-limit overshoot, worst (ms)", Value: worst, Target: "≤ 20", Met: worst <= targetOvershootMs})
		worst = 0
		for _, row := range p.CPUAccounting {
			worst = max(worst, row.MaxAbs)
		}
		ts = append(ts, targetResult{Name: "CPU accounting error, worst (%)", Value: worst, Target: "≤ 2", Met: worst <= targetCPUErrPct})
		worst = 0
		for _, row := range p.Memory {
			worst = max(worst, row.MaxAbs)
		}
		ts = append(ts, targetResult{Name: "memory peak error, worst (%)", Value: worst, Target: "≤ 3", Met: worst <= targetMemErrPct})
	}
	return ts
}

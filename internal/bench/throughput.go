package bench

// ThroughputBlocks is how many blocks of runs each parallelism gets; they
// take turns, in a random order each turn, so that a change in the
// machine's load hits both alike, and the median block counts.
const ThroughputBlocks = 3

// throughputResult is how many `isolate run -- /bin/true` finish per
// second one at a time and two at a time.
type throughputResult struct {
	RunsPerBlock int       `json:"runs_per_block"`
	Blocks       int       `json:"blocks"`
	One          float64   `json:"one_runs_per_s"`
	Two          float64   `json:"two_runs_per_s"`
	Ratio        float64   `json:"ratio"`
	OneBlocks    []float64 `json:"one_blocks_runs_per_s"`
	TwoBlocks    []float64 `json:"two_blocks_runs_per_s"`
}

// throughput measures runs/s with one and with two runs in parallel.
func (r *benchRunner) throughput(perBlock int) (*throughputResult, error) {
	res := &throughputResult{RunsPerBlock: perBlock, Blocks: ThroughputBlocks}
	for b := 0; b < ThroughputBlocks; b++ {
		for _, i := range r.order.next(2) {
			workers := i + 1
			rate, err := r.parallelBlock(perBlock, workers)
			if err != nil {
				return nil, err
			}
			if workers == 1 {
				res.OneBlocks = append(res.OneBlocks, rate)
			} else {
				res.TwoBlocks = append(res.TwoBlocks, rate)
			}
		}
	}
	res.One, res.Two = median(res.OneBlocks), median(res.TwoBlocks)
	res.Ratio = ratio(res.Two, res.One)
	return res, nil
}

// parallelBlock runs n isolate runs of /bin/true on workers workers and
// returns runs per second.
func (r *benchRunner) parallelBlock(n, workers int) (float64, error) {
	return block(n, workers, func(out *sink) (sample, error) {
		took, _, err := r.isolateTrue(out)
		return took, err
	})
}

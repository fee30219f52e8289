package main

// `isolate bench`: what a sandboxed run costs against a bare exec, bwrap
// and unshare, where isolate's time goes, how runs scale on two CPUs, and
// (with --precision) how exactly limits and accounting hold. Benchmarks,
// never assertions: the targets are printed as met or missed.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

func init() { extraCommands = append(extraCommands, benchCommand()) }

// benchResult is everything one `isolate bench` measured.
type benchResult struct {
	Machine    machineInfo       `json:"machine"`
	Rounds     int               `json:"rounds"`
	Latency    []variantResult   `json:"latency"`
	Stages     []stageResult     `json:"stages"`
	Throughput *throughputResult `json:"throughput"`
	Precision  *precisionResult  `json:"precision,omitempty"`
	Targets    []targetResult    `json:"targets"`
}

// targetResult is one of issue 6's targets against its measured value.
type targetResult struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Target string  `json:"target"`
	Met    bool    `json:"met"`
}

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure sandbox overhead against a bare exec",
		Description: "Interleaved rounds of /bin/true: a bare exec, `isolate run`, bwrap and unshare -Urnpimf\n" +
			"(median, p90, ratio to bwrap); isolate's stage breakdown from its own timers; throughput with\n" +
			"1 and 2 parallel runs. --precision adds CPU- and wall-limit overshoot and accounting errors.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "runs", Value: 200, Usage: "interleaved rounds `N` (each runs every variant once)"},
			&cli.BoolFlag{Name: "json", Usage: "print the results as JSON"},
			&cli.BoolFlag{Name: "markdown", Usage: "print the results as the tables of docs/PERFORMANCE.md"},
			&cli.BoolFlag{Name: "precision", Usage: "also measure limit overshoot and accounting error (about a minute)"},
			&cli.IntFlag{Name: "precision-runs", Value: 10, Usage: "runs `N` per precision benchmark"},
		},
		OnUsageError: func(c *cli.Context, err error, _ bool) error { return usageErr(err) },
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usageErr(fmt.Errorf("bench takes no arguments (got %q)", c.Args().First()))
			}
			runs, precRuns := c.Int("runs"), c.Int("precision-runs")
			if runs < 1 {
				return usageErr(fmt.Errorf("--runs %d: must be 1 or more", runs))
			}
			if precRuns < 1 {
				return usageErr(fmt.Errorf("--precision-runs %d: must be 1 or more", precRuns))
			}
			if c.Bool("json") && c.Bool("markdown") {
				return usageErr(errors.New("--json and --markdown exclude each other"))
			}
			if err := requireRoot(); err != nil {
				return err
			}
			// The isolate binary itself, started as a user would start it.
			r := &benchRunner{bin: "/proc/self/exe"}
			res, err := r.bench(runs, c.Bool("precision"), precRuns)
			if err != nil {
				return &exitError{code: exitSandbox, msg: "bench: " + err.Error()}
			}
			switch {
			case c.Bool("json"):
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			case c.Bool("markdown"):
				printMarkdown(os.Stdout, res)
			default:
				printText(os.Stdout, res)
			}
			return nil
		},
	}
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
func (r *benchRunner) bench(rounds int, precision bool, precRuns int) (*benchResult, error) {
	res := &benchResult{Machine: describeMachine(), Rounds: rounds}
	meter := newCPUMeter()
	vs, skipped := r.variants()
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
	progress("throughput: %d alternating blocks of %d runs, 1 and 2 at a time", throughputBlocks, perBlock)
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

// targets checks issue 6's targets against the results.
func targets(res *benchResult) []targetResult {
	var ts []targetResult
	for _, v := range res.Latency {
		if v.Name == varIsolate && v.RatioToBwrap > 0 {
			ts = append(ts, targetResult{Name: "isolate run median / bwrap median", Value: v.RatioToBwrap, Target: "≤ 1.00", Met: v.RatioToBwrap <= 1.0})
		}
	}
	st := stageMedian(res.Stages, stageSetupTeardown)
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

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/isolate-sandbox/isolate/cmdline"
	"github.com/isolate-sandbox/isolate/internal/bench"
)

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
			&cli.BoolFlag{Name: "handover", Usage: "measure isolate run handed to a service of its own against in-process, a bare exec and bwrap (--runs rounds)"},
			&cli.StringFlag{Name: "serve-binary", Usage: "with --handover, the isolate-serve `PATH` to start (default: beside isolate)"},
			&cli.BoolFlag{Name: "service", Usage: "measure the service instead (isolate-serve bench: API latency and throughput, --runs rounds)"},
			&cli.BoolFlag{Name: "rootless", Usage: "measure isolate run without root against unprivileged bwrap, as the same user (as root: nobody; --runs rounds)"},
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
			if c.Bool("rootless") {
				return benchRootless(c, runs)
			}
			if err := requireRoot(); err != nil {
				return err
			}
			if c.Bool("handover") {
				return benchHandover(c, runs)
			}
			if c.Bool("service") {
				// The service's benchmark links the service: it is
				// isolate-serve's, as `isolate serve` is.
				return execServe("bench", []string{"bench", "--rounds", strconv.Itoa(runs)})
			}
			// The isolate binary itself, started as a user would start it.
			res, err := bench.Run(bench.Config{Bin: "/proc/self/exe", Version: cmdline.Version, Rounds: runs, Precision: c.Bool("precision"), PrecisionRuns: precRuns})
			if err != nil {
				return failure("bench: " + err.Error())
			}
			switch {
			case c.Bool("json"):
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			case c.Bool("markdown"):
				bench.PrintMarkdown(os.Stdout, res)
			default:
				bench.PrintText(os.Stdout, res)
			}
			return nil
		},
	}
}

// benchHandover measures `isolate run` through a service the bench starts
// (the service checks the binary it takes runs from: this one, by path).
func benchHandover(c *cli.Context, runs int) error {
	self, err := os.Executable()
	if err != nil {
		return failure("bench: " + err.Error())
	}
	serve := c.String("serve-binary")
	if serve == "" {
		serve = filepath.Join(filepath.Dir(self), serveBinary)
	}
	res, err := bench.RunHandover(bench.HandoverConfig{Bin: self, ServeBin: serve, Version: cmdline.Version, Rounds: runs, PerBlock: max(runs/2, 20)})
	if err != nil {
		return failure("bench: " + err.Error())
	}
	if c.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	bench.PrintHandover(os.Stdout, res, c.Bool("markdown"))
	return nil
}

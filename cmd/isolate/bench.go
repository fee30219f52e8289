package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	cmdline "github.com/isolate-sandbox/isolate/cli"
	"github.com/isolate-sandbox/isolate/internal/bench"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure sandbox overhead against a bare exec",
		Description: "Interleaved rounds of /bin/true: a bare exec, `isolate run`, bwrap and unshare -Urnpimf\n" +
			"(median, p90, ratio to bwrap); isolate's stage breakdown from its own timers; throughput with\n" +
			"1 and 2 parallel runs. --precision adds CPU- and wall-limit overshoot and accounting errors.\n" +
			"Peers in the same rounds (plain and --handover): ioi/isolate (--ioi, or one on PATH) as judges\n" +
			"use it, --run on a box initialised once (also with --cg on pure cgroup v2 hosts); go-judge at\n" +
			"--go-judge URL (POST /run). --handover adds the ioi form of this isolate, in-process and handed over.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "runs", Value: 200, Usage: "interleaved rounds `N` (each runs every variant once)"},
			&cli.BoolFlag{Name: "json", Usage: "print the results as JSON"},
			&cli.BoolFlag{Name: "markdown", Usage: "print the results as markdown tables"},
			&cli.BoolFlag{Name: "precision", Usage: "also measure limit overshoot and accounting error (about a minute)"},
			&cli.IntFlag{Name: "precision-runs", Value: 10, Usage: "runs `N` per precision benchmark"},
			&cli.BoolFlag{Name: "handover", Usage: "measure isolate run handed to a service of its own against in-process, a bare exec and bwrap (--runs rounds)"},
			&cli.BoolFlag{Name: "service", Usage: "measure the service instead: a service of its own, its API's latency (--runs rounds) and throughput against one-shot isolate run"},
			&cli.Float64Flag{Name: "seconds", Value: 5, Usage: "with --service, `S` seconds per throughput measurement"},
			&cli.StringFlag{Name: "ioi", Usage: "ioi/isolate's binary `PATH`, measured on an initialised box in the same rounds (default: an ioi/isolate on PATH)"},
			&cli.StringFlag{Name: "go-judge", Usage: "measure the go-judge at `URL` (POST /run) in the same rounds"},
			&cli.StringFlag{Name: "serve-binary", Usage: "with --handover or --service, the isolate-serve `PATH` to start (default: beside isolate)"},
			&cli.BoolFlag{Name: "sessions", Usage: "measure sessions of a service of its own: time to interactive (--runs rounds, then bursts of 20), a command and run_code(\"1+1\") in a live session, memory per idle session, sessions per CPU-second"},
			&cli.Uint64Flag{Name: "seed", Usage: "the running order's `SEED`: every round and block runs in a random order made from it (default: a new one, printed with the results)"},
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
			if secs := c.Float64("seconds"); !(secs > 0) {
				return usageErr(fmt.Errorf("--seconds %v: must be more than 0", secs))
			}
			if c.Bool("handover") && c.Bool("service") {
				return usageErr(errors.New("--handover and --service exclude each other"))
			}
			if c.Bool("sessions") {
				return benchSessions(c, runs)
			}
			peers, err := benchPeers(c)
			if err != nil {
				return err
			}
			if c.Bool("handover") || c.Bool("service") {
				return benchWithService(c, runs, peers)
			}
			// The isolate binary itself, started as a user would start it.
			res, err := bench.Run(bench.Config{Bin: "/proc/self/exe", Version: cmdline.Version, Rounds: runs, Precision: c.Bool("precision"), PrecisionRuns: precRuns, Peers: peers, Seed: benchSeed(c)})
			if err != nil {
				return failure("bench: " + err.Error())
			}
			return jsonOr(c, res, func() {
				if c.Bool("markdown") {
					bench.PrintMarkdown(os.Stdout, res)
				} else {
					bench.PrintText(os.Stdout, res)
				}
			})
		},
	}
}

// benchWithService measures through a service the bench starts: the
// one-shot CLI handed over to it (--handover; the service checks the
// binary it takes runs from: this one, by path), or its API (--service).
func benchWithService(c *cli.Context, runs int, peers bench.Peers) error {
	self, serve, err := benchBinaries(c)
	if err != nil {
		return err
	}
	if c.Bool("service") {
		res, err := bench.RunService(bench.ServiceConfig{Bin: self, ServeBin: serve, Version: cmdline.Version, Rounds: runs, Seconds: c.Float64("seconds"), ThroughputRounds: 3, Seed: benchSeed(c)})
		if err != nil {
			return failure("bench: " + err.Error())
		}
		return jsonOr(c, res, func() { bench.PrintService(os.Stdout, res) })
	}
	res, err := bench.RunHandover(bench.HandoverConfig{Bin: self, ServeBin: serve, Version: cmdline.Version, Rounds: runs, PerBlock: max(runs/2, 20), Peers: peers, Seed: benchSeed(c)})
	if err != nil {
		return failure("bench: " + err.Error())
	}
	return jsonOr(c, res, func() { bench.PrintHandover(os.Stdout, res, c.Bool("markdown")) })
}

// benchSeed is --seed, or a new seed when none is given: the results
// print it, so any order can be run again.
func benchSeed(c *cli.Context) uint64 {
	if c.IsSet("seed") {
		return c.Uint64("seed")
	}
	return rand.Uint64()
}

// benchBinaries are this isolate binary and the isolate-serve a bench
// starts: --serve-binary, else the one beside it.
func benchBinaries(c *cli.Context) (self, serve string, err error) {
	if self, err = os.Executable(); err != nil {
		return "", "", failure("bench: " + err.Error())
	}
	serve = c.String("serve-binary")
	if serve == "" {
		serve = filepath.Join(filepath.Dir(self), serveBinary)
	}
	return self, serve, nil
}

// benchSessions measures sessions of a service the bench starts.
func benchSessions(c *cli.Context, runs int) error {
	self, serve, err := benchBinaries(c)
	if err != nil {
		return err
	}
	res, err := bench.RunSessions(bench.SessionsConfig{Bin: self, ServeBin: serve, Version: cmdline.Version, Rounds: runs,
		Bursts: 5, BurstSize: 20, Idle: 20, Seconds: c.Float64("seconds")})
	if err != nil {
		return failure("bench: " + err.Error())
	}
	return jsonOr(c, res, func() { bench.PrintSessions(os.Stdout, res) })
}

// benchPeers checks --ioi (an ioi/isolate binary, told from this one by
// its --version) and --go-judge (a URL).
func benchPeers(c *cli.Context) (bench.Peers, error) {
	var p bench.Peers
	if c.IsSet("ioi") {
		p.IOI = c.String("ioi")
		if !bench.IsIOI(p.IOI) {
			return p, usageErr(fmt.Errorf("--ioi %q: not ioi/isolate's binary (its --version does not say \"The process isolator\", or says it is this isolate)", p.IOI))
		}
	}
	if c.IsSet("go-judge") {
		u, err := bench.ParseGoJudgeURL(c.String("go-judge"))
		if err != nil {
			return p, usageErr(err)
		}
		p.GoJudge = u
	}
	return p, nil
}

// jsonOr prints res as JSON with --json, else as print prints it.
func jsonOr(c *cli.Context, res any, print func()) error {
	if c.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	print()
	return nil
}

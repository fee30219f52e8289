package main

import (
	"os"

	"github.com/urfave/cli/v2"

	cmdline "github.com/isolate-sandbox/isolate/cli"
	"github.com/isolate-sandbox/isolate/internal/bench"
)

// benchRootless measures `isolate run` by a user who is not root, in-process
// and handed over to a service of the user's own, against unprivileged
// bwrap by the same user (bench.RunRootless).
func benchRootless(c *cli.Context, runs int) error {
	self, serve, err := benchBinaries(c)
	if err != nil {
		return failure("bench: " + err.Error())
	}
	res, err := bench.RunRootless(bench.RootlessConfig{Bin: self, ServeBin: serve, Version: cmdline.Version, Rounds: runs, Seed: benchSeed(c)})
	if err != nil {
		return failure("bench: " + err.Error())
	}
	return jsonOr(c, res, func() { bench.PrintRootless(os.Stdout, res) })
}

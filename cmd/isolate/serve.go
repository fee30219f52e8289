package main

// `isolate serve [flags]`: the service is a binary of its own
// (cmd/isolate-serve), so that this one-shot binary links none of its
// dependencies (net/http, Prometheus) and starts no slower; this command
// execs it from beside the isolate binary.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"
)

// serveBinary is the service's binary, found in isolate's own directory.
const serveBinary = "isolate-serve"

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:            "serve",
		Usage:           "run the sandbox as an HTTP/JSON service (docs/API.md; isolate serve --help)",
		ArgsUsage:       "[--socket PATH] [--listen ADDR --token-file FILE] [--parallel N] ...",
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			self, err := os.Executable()
			if err != nil {
				return failure("serve: " + err.Error())
			}
			bin := filepath.Join(filepath.Dir(self), serveBinary)
			if _, err := os.Stat(bin); err != nil {
				return failure(fmt.Sprintf("serve: %s is missing (it is built beside isolate: make build): %v", bin, errors.Unwrap(err)))
			}
			argv := append([]string{bin}, c.Args().Slice()...)
			err = syscall.Exec(bin, argv, os.Environ())
			return failure(fmt.Sprintf("serve: exec %s: %v", bin, err))
		},
	}
}

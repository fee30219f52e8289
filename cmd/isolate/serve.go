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
		Action:          func(c *cli.Context) error { return execServe("serve", c.Args().Slice()) },
	}
}

// execServe replaces this process with the service's binary, run with
// args; cmd names the command for errors.
func execServe(cmd string, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return failure(cmd + ": " + err.Error())
	}
	bin := filepath.Join(filepath.Dir(self), serveBinary)
	if _, err := os.Stat(bin); err != nil {
		return failure(fmt.Sprintf("%s: %s is missing (it is built beside isolate: make build): %v", cmd, bin, errors.Unwrap(err)))
	}
	argv := append([]string{bin}, args...)
	err = syscall.Exec(bin, argv, os.Environ())
	return failure(fmt.Sprintf("%s: exec %s: %v", cmd, bin, err))
}

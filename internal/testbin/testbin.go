// Package testbin builds the project's binaries for the tests that drive
// them as users do (the isolate CLI, the service).
package testbin

import (
	"os"
	"os/exec"
)

// Tags are the build tags of the project's binaries (Makefile).
const Tags = "urfave_cli_no_docs,netgo,osusergo"

// Build builds the main package pkg (an import path, or a directory
// relative to the test's) into out, with the project's tags and extra
// go build flags; the compiler's output goes to stderr.
func Build(out, pkg string, extra ...string) error {
	args := append([]string{"build", "-tags", Tags, "-o", out}, extra...)
	build := exec.Command("go", append(args, pkg)...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}

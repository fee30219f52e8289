// The runtime need not size GOMAXPROCS from cgroup files at every start:
// the supervisor waits on the kernel, it does not compute.
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0

// Command isolate runs untrusted programs in a sandbox: see
// docs/REFERENCE.md for the commands, options, report and exit status.
// The command line of run, exec and the ioi form is package cmdline's
// (the service runs it for callers too); the other commands are here.
package main

import (
	"context"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	cmdline "github.com/isolate-sandbox/isolate/cli"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

func init() {
	// Nothing reads a memory profile of a one-shot process, and each
	// sampled allocation walks the stack through pages of the binary's
	// tables it would not touch otherwise.
	runtime.MemProfileRate = 0
	cmdline.Register(checkCommand, cmdline.VersionCommand, benchCommand, boxInitCommand, boxCleanupCommand,
		cmdline.ExecCommand, imageCommand, langsCommand, serveCommand, mcpCommand)
}

func main() {
	boxinit.MaybeInit()
	// Every command runs at most one box and exits with it.
	boxinit.OneShotProcess()
	cmdline.CatchSignalsEarly(os.Args)
	if cmdline.IsIOIForm(os.Args[1:]) {
		// ioi/isolate sets umask 022 once it has parsed its options:
		// what its form creates (the box, the program's output files)
		// gets its modes. Set here, once, for this process alone; the
		// library never sets it (the service shares its process with
		// every run, and takes only callers whose umask is its own).
		unix.Umask(0o022)
	}
	exit := cmdline.Main(context.Background(), &cmdline.Invocation{
		Args: os.Args, Env: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Declined: handoverDeclined(),
	})
	// A box's init started before Go for a run that did not take it.
	isolate.DiscardEarlyInit()
	if exit.Signal != 0 {
		cmdline.DieOf(exit.Signal)
	}
	os.Exit(exit.Code)
}

// usageErr is bad usage: exit status 2.
func usageErr(err error) error { return cmdline.UsageError(err) }

// failure is a failure of the sandbox machinery: exit status 2.
func failure(msg string) error { return cmdline.Failure(msg) }

// requireRoot refuses to go on as another user: boxes need root.
func requireRoot() error { return cmdline.RequireRoot() }

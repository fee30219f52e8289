// The runtime need not size GOMAXPROCS from cgroup files at every start:
// the supervisor waits on the kernel, it does not compute.
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0

// Command isolate runs untrusted programs in a sandbox: see
// ../shared/CONTRACT.md for the commands, options, report and exit status.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/isolate-sandbox/isolate/isolate"
)

// Exit statuses of isolate itself (ioi/isolate's convention).
const (
	exitOK      = 0 // the program exited 0 within all limits
	exitFailed  = 1 // the program failed: RE, SG, TO, ML, CE
	exitSandbox = 2 // usage error or sandbox failure (XX)
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// extraCommands are registered by the init functions of the files that
// define them (exec, image, langs, init, cleanup, bench).
var extraCommands []*cli.Command

// exitError carries an exit status through urfave/cli.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(err error) error { return &exitError{code: exitSandbox, msg: err.Error()} }

func main() {
	isolate.MaybeInit()
	// Every command runs at most one box and exits with it.
	isolate.OneShotProcess()
	os.Exit(run(os.Args))
}

// run executes one isolate command line and returns its exit status.
func run(args []string) int {
	if isIOIForm(args[1:]) {
		return runIOI(args[1:])
	}
	app := newApp()
	err := app.Run(args)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, "isolate: "+ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "isolate: "+err.Error())
	return exitSandbox
}

func newApp() *cli.App {
	return &cli.App{
		Name:                 "isolate",
		Usage:                "run untrusted programs in a sandbox",
		Version:              version,
		HideVersion:          true,
		EnableBashCompletion: false,
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageErr(err)
		},
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: append([]*cli.Command{
			runCommand(),
			checkCommand(),
			versionCommand(),
		}, extraCommands...),
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usageErr(fmt.Errorf("unknown command %q (see isolate --help)", c.Args().First()))
			}
			cli.ShowAppHelp(c)
			return nil
		},
	}
}

// requireRoot refuses to go on as another user: boxes need root, as
// ioi/isolate (setuid root) does.
func requireRoot() error {
	if os.Geteuid() != 0 {
		return usageErr(errors.New("must run as root (box setup needs namespaces, cgroups and mounts)"))
	}
	return nil
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Action: func(c *cli.Context) error {
			fmt.Println("isolate " + version)
			return nil
		},
	}
}

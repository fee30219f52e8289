// Package cmdline is isolate's command line as a library: `run`, `exec`
// and the ioi form, for the isolate binary (its own argv, descriptors and
// signals) and for the service that runs a caller's invocation handed over
// to it (the caller's argv, directory, descriptors, credentials and
// signals), many at once in one process. Everything an invocation parses,
// opens and prints belongs to it: nothing here is shared between two
// Mains.
package cmdline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// Exit statuses of isolate itself (ioi/isolate's convention).
const (
	exitOK      = 0 // the program exited 0 within all limits
	exitFailed  = 1 // the program failed: RE, SG, TO, ML, CE
	exitSandbox = 2 // usage error or sandbox failure (XX)
)

// Version is set at build time with -ldflags "-X
// github.com/isolate-sandbox/isolate/cli.Version=...".
var Version = "dev"

// Invocation is one command line and the world of whoever gave it.
type Invocation struct {
	Args []string // argv; Args[0] is the program name
	// Env is the caller's environment (NAME=VALUE), for -E NAME, ioi's
	// -e and -E NAME.
	Env []string
	// Dir is the caller's working directory: every relative host path
	// resolves from it. "": this process's.
	Dir                   string
	Stdin, Stdout, Stderr *os.File // the caller's standard descriptors
	// Caller is who gave the command line, through the service: whose
	// rights every host path is opened with, checked against Policy. nil:
	// this process's own user, in-process (and boxes need it to be root).
	Caller *caller.Caller
	// Policy is the service's: what Caller may ask, and its caps.
	Policy *caller.Policy
	// Admit, when set, waits for one of the service's run slots for a
	// capped caller (Caller.Capped) and returns its release.
	Admit func(ctx context.Context) (release func(), err error)
	// Host is the front end's one Host (the service's); nil: the
	// invocation makes its own, once (the CLI's, one per process).
	Host *isolate.Host
	// Signals are the signals relayed for the caller; nil: this
	// process's own are caught (from the moment a run begins).
	Signals <-chan syscall.Signal
	Via     string // "service" when the service runs it; "": in-process
	// Declined is which service declined to take this run, handed over
	// to it, and why ("": none did): a run in-process that a user who
	// is not root cannot make names that first, as the cause.
	Declined string
	// RequestID is the service's id of the handover: the report's
	// request_id.
	RequestID string
	// Settled, if set, is told of each report of a run (each phase of an
	// exec): the limits the command line asked, the spec it ran with
	// (caps applied), the report. The service's audit line is made of it.
	Settled func(asked map[string]any, granted *api.Spec, rep *api.Report)
}

// Exit is how an invocation ends: with Code, or, when Signal is not 0, by
// dying of Signal as isolate does when it has no run to interrupt (see
// DieOf).
type Exit struct {
	Code   int
	Signal syscall.Signal
}

// commands are the commands besides run, exec and version that a binary
// registers (Register) before any Main.
var commands []func() *cli.Command

// docCommands are hidden commands that write the man page and the
// completions (docs.go), in builds without urfave_cli_no_docs only.
var docCommands []func() *cli.Command

// Register sets the commands of the app after run, in the order help
// lists them; ExecCommand and VersionCommand belong among them. Called
// from init functions only, before any Main: without it, the commands
// are run, exec and version.
func Register(cmds ...func() *cli.Command) { commands = cmds }

// exitError carries an exit status through urfave/cli.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// UsageError is bad usage: the message, exit status 2.
func UsageError(err error) error { return &exitError{code: exitSandbox, msg: err.Error()} }

// Failure is a failure of the sandbox machinery: the message, exit status 2.
func Failure(msg string) error { return &exitError{code: exitSandbox, msg: msg} }

// usageErr is UsageError, as the commands here spell it.
func usageErr(err error) error { return UsageError(err) }

// invocation is one Main: the Invocation, the options parsed from its
// command line, and its signals.
type invocation struct {
	*Invocation
	values  runValues
	cred    *hostfs.Cred    // Caller's credentials; nil: this process's
	signals *relayedSignals // nil: this process's own
	ctx     context.Context
	ownHost *isolate.Host // made by host() when Invocation.Host is nil
	// rootless: the run is a user's who is not root, in-process
	// (rootless.go).
	rootless bool
	// asked and granted are the run's limits before the caps and its
	// spec after (checkCallerPaths), for Settled.
	asked   map[string]any
	granted *api.Spec
	// resolved maps each relative host path resolved from Dir back to
	// the path as given: messages name it as the caller wrote it, as
	// isolate run from that directory would.
	resolved map[string]string
}

// Main runs one command line and says how it ends.
func Main(ctx context.Context, inv *Invocation) Exit {
	iv := &invocation{Invocation: inv, ctx: ctx}
	if c := inv.Caller; c != nil {
		// The names of descriptors another process gives (/dev/stdout)
		// mean its own standard ones, never this process's; its
		// relative paths resolve from its directory.
		iv.cred = &hostfs.Cred{UID: c.UID, GID: c.GID, Groups: c.Groups,
			Std: &[3]*os.File{inv.Stdin, inv.Stdout, inv.Stderr}, Dir: inv.Dir}
	}
	if inv.Signals != nil {
		iv.signals = relaySignals(inv.Signals)
		defer iv.signals.stop()
	}
	code := iv.main()
	if iv.signals != nil {
		if sig := iv.signals.fatal(); sig != 0 {
			return exitBy(sig)
		}
	}
	return Exit{Code: code}
}

// main executes the command line and returns the exit status.
func (iv *invocation) main() int {
	args := iv.Args
	if IsIOIForm(args[1:]) {
		return iv.runIOI(args[1:])
	}
	app := iv.newApp()
	err := app.Run(args)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(iv.Stderr, "isolate: "+iv.asGiven(ee.msg))
		}
		return ee.code
	}
	fmt.Fprintln(iv.Stderr, "isolate: "+iv.asGiven(err.Error()))
	return exitSandbox
}

func (iv *invocation) newApp() *cli.App {
	cmds := []*cli.Command{iv.runCommand()}
	if commands == nil {
		cmds = append(cmds, ExecCommand(), VersionCommand())
	}
	for _, c := range commands {
		cmds = append(cmds, c())
	}
	for _, c := range docCommands {
		cmds = append(cmds, c())
	}
	// A run never needs exec's flags, whose construction was a fifth of a
	// run's parse (BenchmarkParse): it gets the placeholder, named and
	// described for help, as exec is everywhere else.
	running := len(iv.Args) > 1 && iv.Args[1] == "run"
	for i, c := range cmds {
		// The registered placeholders for the commands that need this
		// invocation's options.
		if c.Name == "exec" && !running {
			cmds[i] = iv.execCommand()
		}
	}
	return &cli.App{
		Name:                 "isolate",
		Usage:                "run untrusted programs in a sandbox",
		Version:              Version,
		HideVersion:          true,
		EnableBashCompletion: false,
		Writer:               iv.Stdout,
		ErrWriter:            iv.Stderr,
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageErr(err)
		},
		ExitErrHandler: func(*cli.Context, error) {},
		Commands:       cmds,
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usageErr(fmt.Errorf("unknown command %q (see isolate --help)", c.Args().First()))
			}
			cli.ShowAppHelp(c)
			return nil
		},
	}
}

// RequireRoot refuses to go on as another user: boxes need root, as
// ioi/isolate (setuid root) does.
func RequireRoot() error {
	if os.Geteuid() != 0 {
		return usageErr(errors.New("must run as root (box setup needs namespaces, cgroups and mounts)"))
	}
	return nil
}

// checkRunner checks who runs a box: through the service, the service
// admitted the caller, and opens every host path with its rights;
// in-process, root, or a user who is not root in rootless mode (the
// service is not there, or the CLI would have handed the run over).
func (iv *invocation) checkRunner() error {
	if iv.Caller == nil {
		iv.rootless = os.Geteuid() != 0
	}
	return iv.checkRootlessFlags()
}

// host is the invocation's Host: the front end's, or its own, made on
// first use.
func (iv *invocation) host() (*isolate.Host, error) {
	if iv.Host != nil {
		// A service of a user's own that enforces the limits with
		// rlimits alone takes a run that allows that, as in-process.
		if err := iv.Host.CheckRlimitsAllowed(iv.values.allowRlimitOnly); err != nil {
			return nil, err
		}
		return iv.Host, nil
	}
	if iv.ownHost == nil {
		var err error
		if iv.rootless {
			iv.ownHost, err = iv.rootlessHost()
			err = iv.declined(err)
		} else {
			iv.ownHost, err = isolate.NewHost(nil)
		}
		if err != nil {
			return nil, err
		}
	}
	return iv.ownHost, nil
}

// path is a host path the caller named, resolved from the caller's
// directory.
func (iv *invocation) path(p string) string {
	if p == "" || iv.Dir == "" || filepath.IsAbs(p) {
		return p
	}
	abs := filepath.Join(iv.Dir, p)
	if iv.resolved == nil {
		iv.resolved = map[string]string{}
	}
	iv.resolved[abs] = p
	return abs
}

// asGiven is msg with the host paths resolved from Dir as the caller gave
// them.
func (iv *invocation) asGiven(msg string) string {
	for abs, given := range iv.resolved {
		msg = strings.ReplaceAll(msg, abs, given)
	}
	return msg
}

// lookupEnv is os.LookupEnv in the caller's environment.
func (iv *invocation) lookupEnv(name string) (string, bool) {
	for _, kv := range iv.Env { // the first, as os.LookupEnv
		if v, ok := cutName(kv, name); ok {
			return v, true
		}
	}
	return "", false
}

func cutName(kv, name string) (string, bool) {
	if len(kv) > len(name) && kv[len(name)] == '=' && kv[:len(name)] == name {
		return kv[len(name)+1:], true
	}
	return "", false
}

// ExecCommand is the placeholder for exec among Register's commands.
func ExecCommand() *cli.Command { return &cli.Command{Name: "exec", Usage: execUsage} }

// VersionCommand is `isolate version`.
func VersionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Action: func(c *cli.Context) error {
			fmt.Fprintln(c.App.Writer, "isolate "+Version)
			return nil
		},
	}
}

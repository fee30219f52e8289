package cmdline

import (
	"errors"
	"fmt"
	"os"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/cli/ioi"
	"github.com/isolate-sandbox/isolate/isolate"
)

// IsIOIForm tells whether the command line (without argv[0]) is
// ioi/isolate's form: one of its commands among the options, before any
// "--".
func IsIOIForm(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--init", "--run", "--cleanup", "--version", "--print-cg-root", "--check-config":
			return true
		}
	}
	return false
}

// runIOI runs ioi/isolate's form of the command line and returns the exit
// status: 0 the program succeeded, 1 it failed, 2 bad usage or a failure
// of the sandbox.
func (iv *invocation) runIOI(args []string) int {
	ioiUsage := func(err error) int {
		fmt.Fprintln(iv.Stderr, "isolate: "+iv.asGiven(err.Error()))
		return exitSandbox
	}
	o, err := ioi.Parse(args)
	if err != nil {
		return ioiUsage(err)
	}
	if o.Mode() == ioi.ModeVersion {
		fmt.Fprintf(iv.Stdout, "The process isolator %s\n(isolate, compatible with ioi/isolate 2.x command lines)\n", Version)
		return exitOK
	}
	if o.Mode() == ioi.ModeCheckConfig {
		// As ioi/isolate: parse the configuration, say nothing if it is
		// valid. The Host's is the one the runs would take.
		if _, err := iv.host(); err != nil {
			return ioiUsage(err)
		}
		return exitOK
	}
	// Persistent boxes are root's: through the service too, only root's
	// (a service a user who is not root runs for itself has none).
	if (iv.Caller == nil && os.Geteuid() != 0) || (iv.Host != nil && iv.Host.Rootless()) {
		return ioiUsage(iv.declined(errors.New("must be started as root")))
	}
	if iv.Caller != nil {
		id := o.BoxID()
		var fe *api.FieldError
		if err := iv.Policy.Check(*iv.Caller, &api.Spec{BoxID: &id}, ""); errors.As(err, &fe) {
			return ioiUsage(fmt.Errorf("-b %d: %s", id, fe.Msg))
		} else if err != nil {
			return ioiUsage(err)
		}
	}
	// The service's runs share its Host: its configuration, cgroup
	// manager, compiled syscall policies and boxes built ahead. Nothing
	// here changes the process's own state (umask, limits): through the
	// service, that process is shared by every run.
	host, err := iv.host()
	if err != nil {
		return ioiUsage(err)
	}
	cfg := host.Config
	if o.BoxID() >= cfg.NumBoxes {
		return ioiUsage(fmt.Errorf("sandbox ID out of range (allowed: 0-%d)", cfg.NumBoxes-1))
	}
	switch o.Mode() {
	case ioi.ModeInit:
		dir, err := ioi.Init(o, host)
		if err != nil {
			return ioiUsage(err)
		}
		fmt.Fprintln(iv.Stdout, dir)
		return exitOK
	case ioi.ModeCleanup:
		if err := ioi.Cleanup(o, host); err != nil {
			return ioiUsage(err)
		}
		return exitOK
	case ioi.ModePrintCgRoot:
		root, err := ioi.CgroupRoot(host)
		if err != nil {
			return ioiUsage(err)
		}
		fmt.Fprintln(iv.Stdout, root)
		return exitOK
	}
	// A signal to isolate interrupts the run from here on: the box is
	// handed back, the meta file written, everything torn down.
	ctx, stop, ok := iv.signalContext()
	if !ok {
		return exitSandbox // a signal ended the invocation: Main says how
	}
	defer stop()
	caller := &ioi.Caller{Env: iv.Env, Path: iv.path, Stdin: iv.Stdin, Stdout: iv.Stdout, Stderr: iv.Stderr, Cred: iv.cred}
	if iv.signals == nil {
		caller.BeforeStart = catchFaults
	}
	rep, err := ioi.Run(ctx, o, host, caller)
	if rep == nil {
		return ioiUsage(err)
	}
	if err != nil {
		fmt.Fprintln(iv.Stderr, "isolate: "+iv.asGiven(err.Error()))
		return exitSandbox
	}
	if o.Meta() == "-" {
		iv.Stdout.WriteString(ioi.MetaText(rep))
	}
	// ioi/isolate's own words, unprefixed (Piston shows them to its
	// users); a failure of the sandbox also with -s, as its die() does.
	outcome := ioi.Outcome(rep)
	if outcome == isolate.StatusXX || !o.Silent() {
		fmt.Fprintln(iv.Stderr, ioi.StatusLine(rep))
	}
	return exitStatus(outcome)
}

package main

// --cli-socket: the one-shot isolate CLI hands its runs here before its Go
// runtime starts (package handover, cmd/isolate/handover.c), and they run
// in this process as the CLI would have run them itself (cmdline.Main),
// with the caller's descriptors, directory, rights and signals.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	cmdline "github.com/isolate-sandbox/isolate/cli"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/service/caller"
	"github.com/isolate-sandbox/isolate/service/handover"
	"github.com/isolate-sandbox/isolate/service/server"
)

// cliService is the handover server and its metric.
type cliService struct {
	*handover.Server
	handovers *prometheus.CounterVec
	listener  *net.UnixListener
	// slot waits for one of the API's run slots, ledger counts runs
	// against the callers' quotas (set before serve).
	slot   func(context.Context, caller.Caller) (func(), error)
	ledger *caller.Ledger
	// audit writes each handover's audit line (set before serve).
	audit *server.Auditor
}

// auditTo writes each handover's line with a.
func (cs *cliService) auditTo(a *server.Auditor) {
	if cs != nil {
		cs.audit = a
	}
}

// startCLI listens on the CLI socket (o.cliSocket; "none": nil) for
// handovers from the isolate binary o.cliBinary (default: the one beside
// this binary), whose runs it runs on host. At the default path (root's,
// or a user's own), a socket another service holds or no isolate binary
// to take runs from leave the service without handovers, with a warning
// (the CLI then runs in-process, as without a service); a path or binary
// given is required.
func startCLI(o *options, gid int, host *isolate.Host, policy *caller.Policy) (*cliService, error) {
	if o.cliSocket == "none" {
		return nil, nil
	}
	cs, err := listenCLI(o, gid, host, policy)
	if err != nil && !o.set["cli-socket"] && o.cliBinary == "" {
		fmt.Fprintln(os.Stderr, "isolate serve: warning: no CLI handovers: "+err.Error())
		return nil, nil
	}
	return cs, err
}

func listenCLI(o *options, gid int, host *isolate.Host, policy *caller.Policy) (*cliService, error) {
	bin := o.cliBinary
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		bin = filepath.Join(filepath.Dir(self), "isolate")
	}
	build, err := handover.BuildID(bin)
	if err != nil {
		return nil, fmt.Errorf("--cli-socket: the isolate binary whose runs it takes: %v (--cli-binary; --cli-socket none turns it off)", err)
	}
	cs := &cliService{handovers: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "isolate_cli_handovers_total", Help: "Runs the isolate CLI handed over on the CLI socket, by outcome.",
	}, []string{"outcome"})}
	for _, o := range []string{handover.OutcomeCompleted, handover.OutcomeCallerGone, handover.OutcomeDeclined, handover.OutcomeBadRequest} {
		cs.handovers.WithLabelValues(o)
	}
	cs.Server = handover.NewServer(build, cs.runHandedOver(host, policy), func(outcome string) {
		cs.handovers.WithLabelValues(outcome).Inc()
	})
	cs.SetVersion(version)
	if host.Rootless() {
		cs.DeclineWhen(ownersRunsOnly)
	}
	cs.LimitConnections(o.conns)
	l, err := server.ListenUnix(o.cliSocket, gid)
	if err != nil {
		return nil, fmt.Errorf("--cli-socket: %v", err)
	}
	cs.listener = l
	fmt.Fprintf(os.Stderr, "isolate serve: taking the isolate CLI's runs on %s\n", o.cliSocket)
	return cs, nil
}

// serve takes handovers, whose capped runs count against their callers'
// quotas in ledger (each run, and its CPU time once it settled) and wait
// for slot.
func (cs *cliService) serve(slot func(context.Context, caller.Caller) (func(), error), ledger *caller.Ledger) {
	if cs == nil {
		return
	}
	cs.slot, cs.ledger = slot, ledger
	go func() {
		if err := cs.Serve(cs.listener); err != nil {
			fmt.Fprintln(os.Stderr, "isolate serve: --cli-socket: "+err.Error())
		}
	}()
}

// runHandedOver runs a handed-over command line as the CLI would, with
// the caller's rights, under the service's policy and run slots.
func (cs *cliService) runHandedOver(host *isolate.Host, policy *caller.Policy) handover.Runner {
	return func(ctx context.Context, inv *handover.Invocation) handover.Exit {
		who := inv.Caller
		audit := newAuditHandover()
		// The box ends once the CLI has exited, off its last steps.
		x := cmdline.Main(isolate.EndAfter(ctx, inv.HungUp), &cmdline.Invocation{
			RequestID: audit.id,
			// Each run settled charges its CPU time to its caller's quota,
			// as Admit counted it in.
			Settled: func(asked map[string]any, granted *api.Spec, rep *api.Report) {
				audit.settled(asked, granted, rep)
				cs.ledger.ChargeCPU(who, server.CPUOf(rep))
			},
			Args: inv.Args, Env: inv.Env, Dir: callerDir(inv),
			Stdin: inv.Stdin, Stdout: inv.Stdout, Stderr: inv.Stderr,
			Caller: &who,
			Policy: policy,
			Admit: func(ctx context.Context) (func(), error) {
				if err := cs.ledger.StartRuns(who, 1); err != nil {
					return nil, err
				}
				return cs.slot(ctx, who)
			},
			Host:    host,
			Signals: inv.Signals,
			Via:     "service",
		})
		cs.audit.Write(audit.line(who, inv, x))
		return handover.Exit{Code: x.Code, Signal: x.Signal}
	}
}

// callerDir is the caller's working directory as a path of this process:
// the name it gave when that still names the directory it is in (so
// messages read as the CLI's own would), else its descriptor's path (the
// directory was renamed or removed, or is not in this mount namespace).
func callerDir(inv *handover.Invocation) string {
	var byName, byFD unix.Stat_t
	if unix.Stat(inv.Dir, &byName) == nil && unix.Fstat(int(inv.DirFile.Fd()), &byFD) == nil &&
		byName.Dev == byFD.Dev && byName.Ino == byFD.Ino {
		return inv.Dir
	}
	return "/proc/self/fd/" + strconv.Itoa(int(inv.DirFile.Fd()))
}

// Shutdown drains the handovers as the HTTP requests are drained.
func (cs *cliService) Shutdown(grace time.Duration) {
	if cs != nil {
		cs.Server.Shutdown(grace)
	}
}

// metrics are the collectors the service's /metrics adds for handovers.
func (cs *cliService) metrics() []prometheus.Collector {
	if cs == nil {
		return nil
	}
	return []prometheus.Collector{cs.handovers}
}

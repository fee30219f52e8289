package main

// Signals sent to isolate itself. Judges stop a run they gave up on with
// SIGTERM or SIGINT, and Piston stops runaway output with SIGABRT. As
// ioi/isolate does, isolate then kills the box, accounts for what ran,
// writes the report (or meta file) and tears everything down: the run
// ends "interrupted", by which signal. The signals are caught from the
// moment a run begins, before it creates anything, so that none finds a
// half-built or half-handed-over box to leave behind, and a Go stack
// trace (the runtime's reaction to QUIT and ABRT) never reaches a judge's
// user. Not earlier: signal.Notify makes the runtime start a thread that
// waits for signals, 1.3 ms of every isolate command here (isolate
// version, A/B), which commands that create nothing need not pay.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// caughtSignals are the signals that interrupt a run: ioi/isolate's
// interrupting ones (HUP, INT, QUIT, TERM) and ABRT, which it dies of as
// a fatal signal after the same cleanup.
var caughtSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGABRT}

// signalCause is why a run was interrupted: the signal isolate got. A
// report's Cause wraps it (errors.As).
type signalCause struct{ sig syscall.Signal }

func (c *signalCause) Error() string { return fmt.Sprintf("signal %d (%v)", int(c.sig), c.sig) }

// Signal is the signal (the ioi form's meta file says it).
func (c *signalCause) Signal() syscall.Signal { return c.sig }

// interrupt is the one context that the caught signals end, and how many
// runs are listening to it.
var interrupt struct {
	once      sync.Once
	ctx       context.Context
	cancel    context.CancelCauseFunc
	listening atomic.Int32
}

// catchSignals starts catching the signals (the first run does). With no
// run listening, a signal ends isolate as its default action would.
func catchSignals() {
	interrupt.ctx, interrupt.cancel = context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, caughtSignals...)
	go func() {
		for sig := range sigs {
			s := sig.(syscall.Signal)
			if interrupt.listening.Load() == 0 {
				dieOf(s)
			}
			interrupt.cancel(&signalCause{s})
		}
	}()
}

// signalContext is the context of a run, ended by a caught signal, and
// the function to call once the run is over.
func signalContext() (context.Context, func()) {
	interrupt.once.Do(catchSignals)
	interrupt.listening.Add(1)
	return interrupt.ctx, func() { interrupt.listening.Add(-1) }
}

// dieOf ends isolate by sig as its default action does: the runtime
// re-raises HUP, INT and TERM with the default action once they are no
// longer caught; for QUIT and ABRT it would print its stack traces, so
// those exit with the status a shell shows for them instead.
func dieOf(sig syscall.Signal) {
	if sig == syscall.SIGQUIT || sig == syscall.SIGABRT {
		os.Exit(128 + int(sig))
	}
	signal.Reset(sig)
	syscall.Kill(os.Getpid(), sig)
	select {}
}

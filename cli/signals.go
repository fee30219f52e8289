package cmdline

// Signals sent to isolate itself, or relayed for an invocation's caller
// (Invocation.Signals). Judges stop a run they gave up on with SIGTERM or
// SIGINT, and Piston stops runaway output with SIGABRT. As
// ioi/isolate does, isolate then kills the box, accounts for what ran,
// writes the report (or meta file) and tears everything down: the run
// ends "interrupted", by which signal. HUP, INT, QUIT, TERM and ABRT are
// caught (catch.go) from the moment a run begins, before it creates
// anything, so that none finds a half-built or half-handed-over box to
// leave behind, and a Go stack trace (the runtime's reaction to QUIT and
// ABRT) never reaches a judge's user. A SEGV, BUS, FPE or ILL that
// kill(2) sent is caught too, through signal.Notify, from the program's
// start: that starts a thread of the runtime's that waits for signals,
// which the run's start need not wait for, and commands that create
// nothing need not pay (1.3 ms, isolate version, A/B). A fault of
// isolate's own (si_code from the kernel) is still the runtime's crash.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
)

// The signals that interrupt a run are ioi/isolate's interrupting ones
// (HUP, INT, QUIT, TERM) and its fatal ones (ILL, ABRT, FPE, SEGV, BUS),
// which it dies of after the same cleanup: asyncSignals (catch.go) and
// faultSignals.
var faultSignals = []os.Signal{syscall.SIGILL, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGBUS}

// signalCause is why a run was interrupted: the signal isolate got. A
// report's Cause wraps it (errors.As).
type signalCause struct{ sig syscall.Signal }

func (c *signalCause) Error() string { return fmt.Sprintf("signal %d (%v)", int(c.sig), c.sig) }

// Signal is the signal (the ioi form's meta file says it).
func (c *signalCause) Signal() syscall.Signal { return c.sig }

// interrupt is the one context that this process's caught signals end,
// and how many runs are listening to it: process-wide, as signals are
// (an invocation with relayed signals has relayedSignals instead).
var interrupt struct {
	once      sync.Once
	ctx       context.Context
	cancel    context.CancelCauseFunc
	listening atomic.Int32
	// faults catches faultSignals once (catchFaults).
	faults sync.Once
}

// CatchSignalsEarly starts catching the signals now, when args (os.Args)
// are a run's.
func CatchSignalsEarly(args []string) {
	if len(args) > 1 && (args[1] == "run" || args[1] == "exec" || (IsIOIForm(args[1:]) && slices.Contains(args, "--run"))) {
		interrupt.once.Do(catchSignals)
	}
}

// ignoredSignals are ignored from a run's start, as ioi/isolate ignores
// them: SIGPIPE (a write to a closed stream, the standard output among
// them, fails instead of ending isolate), SIGUSR1, SIGUSR2, and SIGTTOU
// (whose default action would stop the supervisor while the program runs
// on). The CLI's C entry point ignores them first (handover.c), for a run
// handed over too; the box's init gives its processes the default
// actions back (init_main.c).
var ignoredSignals = []os.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTTOU}

// catchSignals starts catching the signals (the first run does). With no
// run listening, a signal ends isolate as its default action would.
func catchSignals() {
	signal.Ignore(ignoredSignals...)
	interrupt.ctx, interrupt.cancel = context.WithCancelCause(context.Background())
	caught, err := catchAsyncSignals()
	if err != nil {
		// (Not seen: pipe2 and sigaction fail only on bad arguments.)
		// The runtime's way, then.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGABRT)
		go interruptBy(sigs)
		return
	}
	go func() {
		var b [16]byte
		for {
			n, err := caught.Read(b[:])
			for _, s := range b[:n] {
				interruptOrDie(syscall.Signal(s))
			}
			if err != nil {
				return
			}
		}
	}()
}

// catchFaults starts catching faultSignals, once, in the background: the
// run's IO.BeforeStart, so that it overlaps the program's start.
func catchFaults() {
	interrupt.faults.Do(func() {
		go func() {
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, faultSignals...)
			interruptBy(sigs)
		}()
	})
}

func interruptBy(sigs <-chan os.Signal) {
	for sig := range sigs {
		interruptOrDie(sig.(syscall.Signal))
	}
}

// interruptOrDie interrupts the runs listening, or with none ends isolate.
func interruptOrDie(s syscall.Signal) {
	if interrupt.listening.Load() == 0 {
		DieOf(s)
	}
	interrupt.cancel(&signalCause{s})
}

// signalContext is the context of a run, ended by a caught (or relayed)
// signal or by Main's ctx, and the function to call once the run is
// over. ok is false when a signal ended the invocation already: no run
// starts then.
func (iv *invocation) signalContext() (ctx context.Context, stop func(), ok bool) {
	var sigCtx context.Context
	var done func()
	if iv.signals != nil {
		if sigCtx, done, ok = iv.signals.listen(); !ok {
			return nil, nil, false
		}
	} else {
		interrupt.once.Do(catchSignals)
		interrupt.listening.Add(1)
		sigCtx, done = interrupt.ctx, func() { interrupt.listening.Add(-1) }
	}
	if iv.ctx == nil || iv.ctx.Done() == nil {
		return sigCtx, done, true
	}
	// Either ends the run: Main's ctx (the caller went away) or a signal.
	ctx, cancel := context.WithCancelCause(iv.ctx)
	unhook := context.AfterFunc(sigCtx, func() { cancel(context.Cause(sigCtx)) })
	return ctx, func() {
		unhook()
		cancel(nil)
		done()
	}, true
}

// relayedSignals are the signals relayed for one invocation: they
// interrupt its run while one listens; one with no run listening ends the
// invocation as it would end isolate (fatal).
type relayedSignals struct {
	mu        sync.Mutex
	listening int
	died      syscall.Signal // the signal that ended the invocation
	ctx       context.Context
	cancel    context.CancelCauseFunc
	done      chan struct{}
}

func relaySignals(sigs <-chan syscall.Signal) *relayedSignals {
	r := &relayedSignals{done: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	go func() {
		for {
			select {
			case <-r.done:
				return
			case s, open := <-sigs:
				if !open {
					return
				}
				r.mu.Lock()
				if r.listening == 0 && r.died == 0 {
					r.died = s
				}
				r.mu.Unlock()
				r.cancel(&signalCause{s})
			}
		}
	}()
	return r
}

// listen is signalContext's for a relayed signal.
func (r *relayedSignals) listen() (context.Context, func(), bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.died != 0 {
		return nil, nil, false
	}
	r.listening++
	return r.ctx, func() {
		r.mu.Lock()
		r.listening--
		r.mu.Unlock()
	}, true
}

// fatal is the signal that ended the invocation, or 0.
func (r *relayedSignals) fatal() syscall.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.died
}

func (r *relayedSignals) stop() { close(r.done) }

// exitBy is how a relayed signal with no run to interrupt ends the
// invocation: as DieOf ends isolate.
func exitBy(sig syscall.Signal) Exit {
	switch sig {
	case syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM:
		return Exit{Signal: sig}
	}
	return Exit{Code: 128 + int(sig)}
}

// DieOf ends isolate by sig as its default action does: the runtime
// re-raises HUP, INT and TERM with the default action once they are no
// longer caught; for the others it would print its stack traces (and a
// core dump would follow), so those exit with the status a shell shows
// for them instead.
func DieOf(sig syscall.Signal) {
	if e := exitBy(sig); e.Signal == 0 {
		os.Exit(e.Code)
	}
	signal.Reset(sig)
	defaultAction(sig)
	syscall.Kill(os.Getpid(), sig)
	select {}
}

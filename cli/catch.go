package cmdline

// The asynchronous signals that interrupt a run are caught by a C handler
// that writes their number to a pipe, read through Go's poller: catching
// them is a few system calls, made before the run creates anything. The
// runtime's own way (signal.Notify) hands each signal to a thread it
// starts for them, one handshake per signal: a third of a millisecond of
// the run's start with the process's one P.

/*
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static int caught_signals_pipe = -1;

// Async-signal-safe: one write, errno kept. A full pipe drops the byte:
// a run is interrupted once, by the first signal.
static void write_caught_signal(int sig) {
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	if (write(caught_signals_pipe, &b, 1) < 0) {
	}
	errno = saved;
}

// catch_signal has sig written to fd. SA_ONSTACK: it may arrive on a Go
// thread, whose signal stack the runtime set up.
static int catch_signal(int fd, int sig) {
	caught_signals_pipe = fd;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = write_caught_signal;
	sigfillset(&sa.sa_mask);
	sa.sa_flags = SA_ONSTACK | SA_RESTART;
	return sigaction(sig, &sa, NULL);
}

static int default_signal(int sig) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	return sigaction(sig, &sa, NULL);
}
*/
import "C"

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// asyncSignals are the signals that interrupt a run which only other
// processes send, caught in C; faultSignals are also the kernel's reaction
// to a fault of isolate's own, which stays the runtime's.
var asyncSignals = []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGABRT}

// catchAsyncSignals has asyncSignals arrive on the returned file, one
// byte each.
func catchAsyncSignals() (*os.File, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("pipe2: %w", err)
	}
	for _, s := range asyncSignals {
		if C.catch_signal(C.int(p[1]), C.int(s)) != 0 {
			return nil, fmt.Errorf("catch %v: sigaction failed", s)
		}
	}
	return os.NewFile(uintptr(p[0]), "caught-signals"), nil
}

// defaultAction gives sig its default action back (DieOf).
func defaultAction(sig syscall.Signal) { C.default_signal(C.int(sig)) }

package ioi

// ioi/isolate's meta file and status line. The keys, their units and which
// of them appear follow ioi/isolate 2.x: no status line on success, TO
// with "wall" in the message for the wall-clock limit, an OOM kill as the
// signal it is (SG) plus cg-oom-killed:1, XX with a message when the
// sandbox itself failed. Times are truncated to milliseconds, as
// ioi/isolate keeps them.

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
)

// millis is a time in seconds as whole milliseconds, truncated.
func millis(seconds float64) int64 { return int64(seconds*1000 + 1e-6) }

func msText(m int64) string { return fmt.Sprintf("%d.%03d", m/1000, m%1000) }

// MetaText is the meta file of a report.
func MetaText(r *isolate.Report) string {
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	status, message := ioiStatus(r)
	if status == "XX" && !isFatal(interruptedBy(r)) {
		line("status:XX")
		line("message:%s", message)
		return b.String()
	}
	line("time:%s", msText(millis(r.CPUTime)))
	line("time-wall:%s", msText(millis(r.WallTime)))
	line("max-rss:%d", r.MaxRSS/1024)
	line("csw-voluntary:%d", r.CSWVoluntary)
	line("csw-forced:%d", r.CSWInvoluntary)
	line("cg-mem:%d", r.MemoryPeak/1024)
	// ioi/isolate's callers read cg-oom-killed as "memory limit exceeded":
	// also when the sandbox ended a box stuck at its limit.
	if r.OOMKilled || r.Status == isolate.StatusML {
		line("cg-oom-killed:1")
	}
	switch sig := interruptedBy(r); {
	case isFatal(sig):
		// ioi/isolate's die(): the box killed and accounted for, no
		// exitsig (the program did not die of a signal of its own).
		line("killed:1")
	case sig != 0:
		// Interrupted: killed (or never started), with the signal
		// isolate got, as ioi/isolate writes it.
		line("killed:1")
		line("exitsig:%d", sig)
	case r.Killed && r.Limit != isolate.LimitMemory:
		line("killed:1")
	case status == "TO":
	case r.Signal != 0:
		line("exitsig:%d", r.Signal)
	default:
		line("exitcode:%d", r.ExitCode)
	}
	if status != "" {
		line("status:%s", status)
		line("message:%s", message)
	}
	return b.String()
}

// ioiStatus is ioi/isolate's status and message for a finished run ("" on
// success).
func ioiStatus(r *isolate.Report) (status, message string) {
	switch sig := interruptedBy(r); {
	case isFatal(sig):
		// ioi/isolate's signal_fatal: it dies of it, after the same
		// cleanup as an interruption.
		return "XX", fmt.Sprintf("Sandbox keeper received fatal signal %d", sig)
	case sig != 0:
		return "SG", "Interrupted"
	case r.Status == isolate.StatusXX:
		return "XX", oneLine(r.Message)
	case r.Killed && r.Limit == isolate.LimitMemory:
		// As when the OOM killer acts: the program died of SIGKILL.
		return "SG", fmt.Sprintf("Caught fatal signal %d", r.Signal)
	case r.Killed && r.Limit == isolate.LimitWall:
		return "TO", "Time limit exceeded (wall clock)"
	case r.Killed || r.Status == isolate.StatusTO:
		return "TO", "Time limit exceeded"
	case r.Signal != 0:
		return "SG", fmt.Sprintf("Caught fatal signal %d", r.Signal)
	case r.ExitCode != 0:
		return "RE", fmt.Sprintf("Exited with error status %d", r.ExitCode)
	}
	return "", ""
}

// isFatal tells whether a signal to isolate is one of ioi/isolate's
// SIGNAL_FATAL ones (signal_rules in its isolate.c): the run ends XX.
// The others it catches (HUP, INT, QUIT, TERM) interrupt the run: SG.
func isFatal(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGILL, syscall.SIGABRT, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGBUS:
		return true
	}
	return false
}

// interruptedBy is the signal to isolate that interrupted the run, or 0:
// the report's Cause wraps why the run's context ended, which the front
// end makes an error with a Signal method when a signal ended it.
func interruptedBy(r *isolate.Report) syscall.Signal {
	var sc interface{ Signal() syscall.Signal }
	if errors.As(r.Cause, &sc) {
		return sc.Signal()
	}
	return 0
}

// ioiAdjust makes a report's outcome ioi/isolate's: a program that ended
// by itself timed out only when its CPU time in whole milliseconds is over
// the limit (ioi/isolate compares milliseconds).
func ioiAdjust(r *isolate.Report, limit time.Duration) {
	if r.Status == isolate.StatusTO && !r.Killed && millis(r.CPUTime) <= limit.Milliseconds() {
		r.Status, r.Limit, r.Message = isolate.StatusOK, isolate.LimitNone, ""
		switch {
		case r.Signal != 0:
			r.Status = isolate.StatusSG
		case r.ExitCode != 0:
			r.Status = isolate.StatusRE
		}
	}
}

// Outcome is a report's status as ioi/isolate judges it: OK, RE, SG, TO
// or XX (a failure the native form reports as ML is RE or SG there).
func Outcome(r *isolate.Report) api.Status {
	if status, _ := ioiStatus(r); status != "" {
		return api.Status(status)
	}
	return api.StatusOK
}

// StatusLine is what ioi/isolate prints on its standard error after a run.
func StatusLine(r *isolate.Report) string {
	if status, message := ioiStatus(r); status != "" {
		return message
	}
	return fmt.Sprintf("OK (%s sec real, %s sec wall)", msText(millis(r.CPUTime)), msText(millis(r.WallTime)))
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

package main

// The service's audit trail (--audit-file; standard error always) and its
// monitor listeners (--monitor-listen, --monitor-socket), and the audit
// line of each handed-over command line.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	cmdline "github.com/isolate-sandbox/isolate/cli"
	"github.com/isolate-sandbox/isolate/service/caller"
	"github.com/isolate-sandbox/isolate/service/handover"
	"github.com/isolate-sandbox/isolate/service/server"
)

// openAuditor writes audit lines to standard error and, with
// --audit-file, to that file: opened once, appended to, mode 0600, a
// regular file of this process's user reached without a symlink.
func (o *options) openAuditor() (*server.Auditor, func(), error) {
	if o.auditFile == "" {
		return server.NewAuditor(os.Stderr), func() {}, nil
	}
	fd, err := unix.Open(o.auditFile, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("--audit-file %s: %w", o.auditFile, err)
	}
	f := os.NewFile(uintptr(fd), o.auditFile)
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	switch {
	case err != nil:
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = errors.New("not a regular file")
	case int(st.Uid) != os.Geteuid():
		err = fmt.Errorf("owned by uid %d, not the service's", st.Uid)
	default:
		err = unix.Fchmod(fd, 0o600)
	}
	if err == nil {
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("--audit-file %s: %v", o.auditFile, err)
	}
	return server.NewAuditor(os.Stderr, f), func() { f.Close() }, nil
}

// monitorListeners are the monitor's listeners: --monitor-listen (TCP)
// and --monitor-socket (a unix socket anyone on the host may connect to,
// in root's service; the user's alone in a user's own).
func (o *options) monitorListeners() ([]net.Listener, error) {
	var ls []net.Listener
	if o.monitorListen != "" {
		l, err := net.Listen("tcp", o.monitorListen)
		if err != nil {
			return nil, fmt.Errorf("--monitor-listen: %w", err)
		}
		ls = append(ls, l)
	}
	if o.monitorSocket != "" {
		l, err := server.ListenUnix(o.monitorSocket, -1)
		if err == nil && os.Geteuid() == 0 {
			err = os.Chmod(o.monitorSocket, 0o666)
		}
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, fmt.Errorf("--monitor-socket: %w", err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// auditHandover is how a handover is told to its audit line: the
// invocation's request id and its reports (cmdline.Invocation's
// RequestID and Settled), then the line once the CLI has its exit.
type auditHandover struct {
	id       string
	start    time.Time
	commands []server.AuditCommand
}

func newAuditHandover() *auditHandover {
	return &auditHandover{id: server.NewRequestID(), start: time.Now()}
}

func (a *auditHandover) settled(asked map[string]any, granted *api.Spec, rep *api.Report) {
	a.commands = append(a.commands, server.AuditCommandOf(asked, granted, rep))
}

// line is the handover's audit line: who, the command (run, exec, the
// ioi form), the exit, and the reports it made.
func (a *auditHandover) line(who caller.Caller, inv *handover.Invocation, x cmdline.Exit) *server.AuditLine {
	l := &server.AuditLine{Time: a.start, RequestID: a.id, FrontEnd: server.FrontHandover, Endpoint: handoverCommand(inv.Args),
		Caller: server.AuditCallerOf(who), Exit: &x.Code, Duration: time.Since(a.start).Seconds(), Commands: a.commands}
	switch l.Verdict = server.Verdict(a.commands); {
	case l.Verdict != "":
	case x.Signal != 0:
		l.Verdict = "signal " + strconv.Itoa(int(x.Signal))
	case x.Code == 0:
		l.Verdict = "ok"
	case x.Code == 2:
		l.Verdict = "refused" // a usage error or a refusal: the CLI's line says which
	default:
		l.Verdict = "exit " + strconv.Itoa(x.Code)
	}
	return l
}

// handoverCommand names a handed-over command line: its command (run,
// exec...), or "ioi" for the ioi/isolate-compatible form.
func handoverCommand(args []string) string {
	if len(args) > 1 && cmdline.IsIOIForm(args[1:]) {
		return "ioi"
	}
	for _, a := range args[1:] {
		if len(a) > 0 && a[0] != '-' {
			return a
		}
	}
	return ""
}

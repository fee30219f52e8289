package isolate

// A box with an allowlist (Spec.Egress) keeps its own network namespace
// with loopback alone; the supervisor makes the proxy's listener on that
// loopback, inside the namespace, and serves it from outside: every
// connection the box makes through it is checked and made from the
// host's network (package egress). Nothing else of the host's network is
// joined to the box: no veth, no route, no NAT.

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/egress"
	"github.com/isolate-sandbox/isolate/egress/proxy"
)

// startEgress serves the box's allowlist on its loopback before the
// program starts.
func (s *supervisor) startEgress() error {
	if s.spec.Egress == nil {
		return nil
	}
	l, err := listenInNetns(s.boxPid, egress.Port)
	if err != nil {
		return fmt.Errorf("the network allowlist's proxy: %w", err)
	}
	s.proxy = proxy.New(s.spec.Egress, nil, nil)
	s.proxy.Serve(l)
	s.timer.mark("egress")
	return nil
}

// stopEgress ends the proxy and its connections, and reports them.
func (s *supervisor) stopEgress() {
	if s.proxy != nil {
		s.report.Network = s.proxy.Close()
		s.proxy = nil
	}
}

// listenInNetns listens on 127.0.0.1:port in the network namespace of
// process pid: this thread joins it for the socket's making (a socket
// belongs to the namespace it was made in), then goes back. A thread
// that cannot go back is never used again: it ends with its goroutine.
func listenInNetns(pid, port int) (net.Listener, error) {
	target, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, err
	}
	defer target.Close()
	type result struct {
		l   net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer own.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("join the box's network namespace: %w", err)}
			return
		}
		l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(port))
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{l, err}
	}()
	r := <-done
	return r.l, r.err
}

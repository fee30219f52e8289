package isolate

// A box with an allowlist (Spec.Egress) keeps its own network namespace
// with loopback alone; its PID 1 listens on that loopback as the box is
// built (LISTEN), and the supervisor takes that listener and serves it
// from outside: every connection the box makes through it is checked and
// made from the host's network (package egress). Nothing else of the
// host's network is joined to the box: no veth, no route, no NAT, and no
// privilege is needed (the supervisor is PID 1's parent, or its
// service's), so it works without root too.

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
	"github.com/isolate-sandbox/isolate/isolate/egress/proxy"
)

// startEgress serves the box's allowlist on its loopback before the
// program starts.
func (s *supervisor) startEgress() error {
	if s.spec.Egress == nil {
		return nil
	}
	l, err := boxListener(s.boxPid)
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

// boxListener is PID 1's listener on the box's loopback (LISTEN): a copy
// of its descriptor, taken through a pidfd of the box's PID 1.
func boxListener(pid int) (net.Listener, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open of the box's PID 1: %w", err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, boxinit.FDProxy, 0)
	if err != nil {
		return nil, fmt.Errorf("take the box's listener (pidfd_getfd): %w", err)
	}
	f := os.NewFile(uintptr(fd), "egress-listener")
	defer f.Close()
	return net.FileListener(f)
}

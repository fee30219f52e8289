package main

// Readiness under systemd (Type=notify in the unit, scripts/isolate.service):
// the service tells the manager it is ready once its sockets listen, and
// that it is stopping when it begins to drain, so that units ordered
// after it start only when its sockets answer. The protocol is
// sd_notify(3)'s: one datagram of NAME=VALUE lines on the unix socket
// $NOTIFY_SOCKET (an abstract one when the name begins with "@").

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// sdNotify sends state (e.g. "READY=1") to the service manager. Without
// $NOTIFY_SOCKET (not started by a manager that waits for it) it does
// nothing.
func sdNotify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	// Go's unix addresses spell an abstract name with "@", as systemd does.
	if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") {
		return fmt.Errorf("NOTIFY_SOCKET %q: not a unix socket", addr)
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	return nil
}

// notify is sdNotify, a failure only warned about: the service works
// without its manager knowing.
func notify(state string) {
	if err := sdNotify(state); err != nil {
		fmt.Fprintln(os.Stderr, "isolate serve: warning: "+err.Error())
	}
}

package main

// `isolate-serve drain`: for a pod's preStop hook (or an operator before
// a stop). It sends the service SIGUSR1, which makes it take no more
// runs, handovers or queue jobs (new requests and those waiting for a
// slot get 503; the queue's worker reads no more and hands back what it
// has not started) while it finishes what it holds, and waits until it
// holds nothing. The service stays up, not ready, until its SIGTERM.
// Exit status 0 once drained, 1 when --timeout passed first, 2 on bad
// flags or a service it cannot reach.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/service/server"
)

func drain(args []string) error {
	fs := flag.NewFlagSet("isolate-serve drain", flag.ContinueOnError)
	socket := fs.String("socket", server.DefaultSocket, "the service's unix socket")
	tokenFile := fs.String("token-file", "", "the service's bearer token (its --token-file)")
	timeout := fs.Duration("timeout", 0, "give up waiting after this long (exit 1; 0: wait until drained)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	token, err := tokenOf(*tokenFile)
	if err != nil {
		return err
	}
	pid, err := servicePID(*socket)
	if err != nil {
		return err
	}
	if err := unix.Kill(pid, syscall.SIGUSR1); err != nil {
		return fmt.Errorf("signal the service (pid %d): %v", pid, err)
	}
	client := socketClient(*socket, 5*time.Second)
	var deadline <-chan time.Time
	if *timeout > 0 {
		deadline = time.After(*timeout)
	}
	for {
		h, err := askHealth(client, token)
		if err == nil && h.Drain && h.Running == 0 && h.Waiting == 0 {
			fmt.Fprintf(os.Stderr, "isolate serve drain: the service (pid %d) is drained\n", pid)
			return nil
		}
		select {
		case <-deadline:
			fmt.Fprintf(os.Stderr, "isolate serve drain: not drained after %v (running %d, waiting %d)\n", *timeout, h.Running, h.Waiting)
			os.Exit(1)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// servicePID is the pid of the service listening on socket: the kernel's
// record of the process at the socket's other end (SO_PEERCRED).
func servicePID(socket string) (int, error) {
	c, err := net.Dial("unix", socket)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("the service's pid (SO_PEERCRED): %v", cerr)
	}
	if cred.Pid <= 0 {
		return 0, errors.New("the service's pid is not visible from here (another PID namespace)")
	}
	return int(cred.Pid), nil
}

// askHealth is the service's health answer (ready or not).
func askHealth(client *http.Client, token string) (server.Health, error) {
	var h server.Health
	_, body, err := getHealth(client, token)
	if err != nil {
		return h, err
	}
	return h, json.Unmarshal(body, &h)
}

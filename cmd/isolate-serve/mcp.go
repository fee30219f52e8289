package main

// `isolate-serve mcp` (`isolate mcp`): the MCP front end on standard
// input and output, for an agent that starts it as a local tool server.
// Its tools go through a service's API as the user who started it: the
// service at --socket, else root's or the user's own that runs, else a
// service of its own on private sockets, started for this connection and
// stopped with it.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/service/mcp"
	"github.com/isolate-sandbox/isolate/service/server"
)

func mcpStdio(args []string) error {
	fs := flag.NewFlagSet("isolate mcp", flag.ContinueOnError)
	socket := fs.String("socket", "", "the API socket of the service to use (default: root's, else the user's own, else one started for this connection)")
	allowRlimitOnly := fs.Bool("allow-rlimit-only", false, "a service started for this connection by a user who is not root may enforce limits with rlimits alone where no cgroup is delegated")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // the usage is printed: asked for, not a mistake
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("mcp: unexpected argument %q", fs.Arg(0))
	}
	mcp.Version = version
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	sock := *socket
	if sock == "" {
		sock = runningService()
	} else if !answers(sock) {
		return fmt.Errorf("--socket %s: no service answers there", sock)
	}
	if sock == "" {
		own, end, err := startOwnService(*allowRlimitOnly)
		if err != nil {
			return err
		}
		defer end()
		sock = own
	}
	return mcp.ServeStdio(ctx, mcp.SocketAPI(sock))
}

// runningService is the API socket of a service that answers: root's,
// else (for a user who is not root) the user's own; "" if none does.
func runningService() string {
	if answers(server.DefaultSocket) {
		return server.DefaultSocket
	}
	if os.Geteuid() != 0 {
		if dir, err := isolate.UserRuntimeDir(); err == nil {
			if s := filepath.Join(dir, filepath.Base(server.DefaultSocket)); answers(s) {
				return s
			}
		}
	}
	return ""
}

// answers tells whether a service's health answers on socket (ready or
// not: a service that cannot run boxes says why in each answer).
func answers(socket string) bool {
	resp, err := socketClient(socket, 2*time.Second).Get("http://isolate/v1/health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusServiceUnavailable
}

// startOwnService starts this binary as a service on sockets in a private
// directory (the user's rights, the user's caps: none) and waits until it
// answers; end stops it and removes the directory.
func startOwnService(allowRlimitOnly bool) (socket string, end func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "isolate-mcp-")
	if err != nil {
		return "", nil, err
	}
	socket = filepath.Join(dir, "api.sock")
	args := []string{"--socket", socket, "--cli-socket", "none", "--store", filepath.Join(dir, "files"), "--pool", "2", "--grace", "5s"}
	if allowRlimitOnly {
		args = append(args, "--allow-rlimit-only")
	}
	cmd := exec.Command(self, args...)
	// Standard output is the MCP connection's: the service's messages go
	// to standard error. It dies with this process, however that ends.
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	end = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-exited:
			os.RemoveAll(dir)
			return "", nil, fmt.Errorf("the service started for this connection ended: %v (see its message above)", err)
		default:
		}
		if answers(socket) {
			return socket, end, nil
		}
	}
	end()
	return "", nil, errors.New("the service started for this connection did not answer within 30 s")
}

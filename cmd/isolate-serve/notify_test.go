package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// notifySocket opens a socket the way a service manager does for
// Type=notify, at name (a path, or "@..." abstract), and points
// $NOTIFY_SOCKET at it.
func notifySocket(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", name)
	return c
}

// nextMessage reads one datagram, or fails the test after a generous
// deadline (a message that never comes must not hang the suite).
func nextMessage(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

// sdNotify sends its state as one datagram, to a socket path or an
// abstract name, and nothing without $NOTIFY_SOCKET.
func TestSDNotifyMessage(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@isolate-serve-notify-test-%d", os.Getpid()),
	} {
		c := notifySocket(t, name)
		if err := sdNotify("READY=1\nSTATUS=listening"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := nextMessage(t, c); got != "READY=1\nSTATUS=listening" {
			t.Errorf("%s: got %q", name, got)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v", err)
	}
	t.Setenv("NOTIFY_SOCKET", "vsock:2:1234")
	if err := sdNotify("READY=1"); err == nil || !strings.Contains(err.Error(), "NOTIFY_SOCKET") {
		t.Errorf("NOTIFY_SOCKET of another kind: %v, want an error naming it", err)
	}
}

// The service says READY=1 once its socket answers (a request right
// after the message is served, nothing waited for), and STOPPING=1 when
// SIGTERM makes it drain.
func TestServiceNotifiesReadyAndStopping(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the service needs root")
	}
	dir := t.TempDir()
	ns := notifySocket(t, filepath.Join(dir, "notify"))
	c := &child{sock: filepath.Join(dir, "api.sock"), log: &bytes.Buffer{}}
	c.cmd = exec.Command(os.Args[0], "--socket", c.sock, "--store", filepath.Join(dir, "files"),
		"--cli-socket", "none", "--pool", "0", "--grace", "10s")
	c.cmd.Env = append(os.Environ(), serveChildEnv+"=1")
	c.cmd.Stderr = c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	if got := nextMessage(t, ns); got != "READY=1" {
		t.Fatalf("first message %q, want READY=1\n%s", got, c.log)
	}
	if code, body := c.get("/v1/version"); code != 200 {
		t.Fatalf("right after READY=1: %d %s", code, body)
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	if got := nextMessage(t, ns); got != "STOPPING=1" {
		t.Errorf("on SIGTERM: %q, want STOPPING=1", got)
	}
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("SIGTERM: %v\n%s", err, c.log)
	}
}

// --version and -version print the version, as isolate version does.
func TestVersionFlag(t *testing.T) {
	for _, flag := range []string{"--version", "-version"} {
		cmd := exec.Command(os.Args[0], flag)
		cmd.Env = append(os.Environ(), serveChildEnv+"=1")
		out, err := cmd.Output()
		if err != nil || string(out) != "isolate-serve "+version+"\n" {
			t.Errorf("%s: %v, %q", flag, err, out)
		}
	}
}

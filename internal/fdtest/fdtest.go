// Package fdtest starves a test's own process of descriptors, and floods
// a socket with idle connections from another user, for tests of
// services' accept loops and connection limits; WaitFor polls for what
// such a service does in its own time.
package fdtest

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// StarveAccept makes the service in this process find no descriptor to
// accept a connection to the unix socket sock with: it connects with the
// last one this process has, waits until starved (the service's count of
// such accepts) is above 0, then gives every descriptor back. The
// deadline only keeps a broken service from hanging the suite.
func StarveAccept(tb testing.TB, sock string, starved func() int64) {
	tb.Helper()
	release := Starve(tb, 64)
	defer release()
	c, err := net.Dial("unix", sock)
	if err != nil {
		tb.Fatalf("connect with the last descriptor: %v", err)
	}
	defer c.Close()
	WaitFor(tb, "the service's accept to find itself without a descriptor", func() bool { return starved() > 0 })
}

// WaitFor polls cond until it holds; the deadline only keeps a broken
// service from hanging the suite.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("never happened: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Starve lowers this process's descriptor limit to what it has open plus
// spare, and holds every descriptor but one: the next connection the
// caller makes takes the last, and the service in this process finds
// none to accept it with. The returned function gives them all back.
func Starve(tb testing.TB, spare int) (release func()) {
	tb.Helper()
	restore := Lower(tb, spare)
	var held []*os.File
	for {
		r, w, err := os.Pipe()
		if err != nil {
			break
		}
		held = append(held, r, w)
	}
	if len(held) > 0 {
		held[len(held)-1].Close()
		held = held[:len(held)-1]
	}
	return func() {
		for _, f := range held {
			f.Close()
		}
		restore()
	}
}

// Lower lowers this process's descriptor limit to what it has open plus
// spare until the returned function (or the test's end) restores it.
func Lower(tb testing.TB, spare int) (restore func()) {
	tb.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		tb.Fatal(err)
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	lim := unix.Rlimit{Cur: uint64(len(open) + spare), Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	restore = func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) }
	tb.Cleanup(restore)
	return restore
}

// Flood connects n times to the unix socket sock as uid 65534 (nobody),
// from a process of its own (whose descriptors are not the test's), and
// holds the connections, idle, until the test ends. before runs once
// that process has started and before it connects.
func Flood(tb testing.TB, sock string, n int, before func()) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: floods the socket as another user")
	}
	flood := exec.Command("/usr/bin/python3", "-c", `
import socket, sys
sys.stdin.readline()
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[1])
    except OSError:
        pass
    held.append(s)
print("connected", flush=True)
sys.stdin.read()
`, sock, strconv.Itoa(n))
	flood.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	flood.Stderr = os.Stderr
	stdin, err := flood.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := flood.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := flood.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		flood.Wait()
	})
	if before != nil {
		before()
	}
	stdin.Write([]byte("go\n"))
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "connected\n" {
		tb.Fatalf("the flooder: %q %v", line, err)
	}
}

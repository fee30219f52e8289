package handover

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/internal/connlimit"
)

// lowerFiles lowers this process's (the service's) descriptor limit to
// what it has open plus spare, until the test ends.
func lowerFiles(t *testing.T, spare int) {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	lim := unix.Rlimit{Cur: uint64(len(open) + spare), Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
}

// When the service has no descriptor left, a connection waiting to be
// accepted stays in the backlog and the accept loop waits: it does not
// end, and the next run is handed over as usual.
func TestAcceptSurvivesRunningOutOfDescriptors(t *testing.T) {
	s, sock := startLimitedServer(t, connlimit.Limits{})
	lowerFiles(t, 64)
	// Hold every descriptor but one, then connect with that one: the
	// service's accept of this connection finds none left.
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
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("connect with the last descriptor: %v", err)
	}
	waitFor(t, "the service's accept to find no descriptor", func() bool {
		starved, _ := s.Starved()
		return starved > 0
	})
	for _, f := range held {
		f.Close()
	}
	c.Close()
	if got := echoed(t, cli(sock, "/", "run", "--", "true")); len(got.Args) == 0 {
		t.Fatal("the run after the shortage was not handed over")
	}
}

// One uid's idle connections, past its share, are closed at once: they
// leave the service the descriptors other callers' runs need.
func TestOneUIDsIdleConnectionsLeaveOthersTheirRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: floods the socket as another user")
	}
	s, sock := startLimitedServer(t, connlimit.Limits{PerPeer: 8})
	flood := exec.Command("/usr/bin/python3", "-c", `
import socket, sys
sys.stdin.readline()
held = []
for _ in range(200):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[1])
    except OSError:
        pass
    held.append(s)
print("connected", flush=True)
sys.stdin.read()
`, sock)
	flood.Stderr = os.Stderr
	flood.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, err := flood.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := flood.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	defer flood.Wait()
	defer stdin.Close()
	// Enough descriptors for the flooder's share and a run, far fewer
	// than its connections (lowered once the flooder has its own).
	lowerFiles(t, 40)
	stdin.Write([]byte("go\n"))
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "connected\n" {
		t.Fatalf("the flooder: %q %v", line, err)
	}
	waitFor(t, "the flooder's connections past its share to be refused", func() bool {
		_, refused := s.Starved()
		return refused >= 200-8
	})
	if got := echoed(t, cli(sock, "/", "run", "--", "true")); got.UID != 0 {
		t.Fatalf("the run was handed over as uid %d", got.UID)
	}
}

// startLimitedServer serves handovers with echoRunner within lim on a
// socket other users may reach.
func startLimitedServer(t *testing.T, lim connlimit.Limits) (*Server, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "handover-limits-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "cli.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sock, 0o666)
	s := NewServer(isolateBuild, echoRunner, nil)
	s.LimitConnections(lim)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Shutdown(5 * time.Second)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, sock
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

package handover

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/internal/connlimit"
	"github.com/isolate-sandbox/isolate/internal/fdtest"
)

// When the service has no descriptor left, a connection waiting to be
// accepted stays in the backlog and the accept loop waits: it does not
// end, and the next run is handed over as usual.
func TestAcceptSurvivesRunningOutOfDescriptors(t *testing.T) {
	s, sock := startLimitedServer(t, connlimit.Limits{})
	fdtest.StarveAccept(t, sock, func() int64 {
		_, _, starved := s.Connections()
		return starved
	})
	if got := echoed(t, cli(sock, "/", "run", "--", "true")); len(got.Args) == 0 {
		t.Fatal("the run after the shortage was not handed over")
	}
}

// One uid's idle connections, past its share, are closed at once: they
// leave the service the descriptors other callers' runs need.
func TestOneUIDsIdleConnectionsLeaveOthersTheirRuns(t *testing.T) {
	s, sock := startLimitedServer(t, connlimit.Limits{PerPeer: 8})
	// Enough descriptors for the flooder's share and a run, far fewer
	// than its connections (lowered once the flooder has its own).
	fdtest.Flood(t, sock, 200, func() { fdtest.Lower(t, 40) })
	fdtest.WaitFor(t, "the flooder's connections past its share to be refused", func() bool {
		_, refused, _ := s.Connections()
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
	s := NewServer(isolateBuild, echoRunner, nil)
	s.LimitConnections(lim)
	serveOn(t, s, sock)
	os.Chmod(sock, 0o666)
	return s, sock
}

// A request of more strings than a command line holds is refused before
// they are built: a body of NULs is not millions of strings.
func TestRequestOfTooManyStringsIsRefused(t *testing.T) {
	nuls := make([]byte, 8+4+maxStrings+1)
	binary.NativeEndian.PutUint32(nuls, maxStrings+1) // argc
	if _, err := decodeRequest(nuls); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("%d empty arguments: %v, want refused", maxStrings+1, err)
	}
	ok := encodeRequest(&request{build: "b", args: make([]string, maxStrings)})[headerSize:]
	if _, err := decodeRequest(ok); err != nil {
		t.Errorf("%d arguments: %v", maxStrings, err)
	}
}

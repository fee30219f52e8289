package isolate_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
)

// The boxes a service builds ahead for a persistent box id share one
// network namespace, the first one's: its loopback up, out of the later
// boxes' reach (its owner, the first box's user namespace, is not theirs);
// the host's for a run of the host network; never two box ids'. A run
// that leaves a TCP socket behind (here one in TIME_WAIT, which would
// hold its port) takes the namespace with it: the next run has a fresh
// one and binds the same port.
func TestPoolKeepsABoxIDsNetworkNamespace(t *testing.T) {
	checkNothingLeft(t)
	cfg, h := pooledBoxRoot(t)
	hostNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{736, 737} {
		if _, err := isolate.InitBox(cfg, id, isolate.Caller(), false); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { isolate.CleanupBox(cfg, id, false) })
	}
	run := func(id int, net, script string) (*api.Report, string) {
		t.Helper()
		boxID := id
		rep, err := h.Run(context.Background(), &api.Spec{BoxID: &boxID, Net: net,
			Args: []string{"/bin/sh", "-c", "readlink /proc/self/ns/net; " + script}}, isolate.IO{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Status != api.StatusOK {
			t.Fatalf("box %d: %s %q, stdout %q, stderr %q", id, rep.Status, rep.Message, rep.Stdout, rep.Stderr)
		}
		ns, rest, _ := strings.Cut(rep.Stdout, "\n")
		return rep, ns + "\x00" + rest
	}
	netOf := func(out string) string { ns, _, _ := strings.Cut(out, "\x00"); return ns }
	outOf := func(out string) string { _, o, _ := strings.Cut(out, "\x00"); return o }

	run(736, "", "true") // builds its own box; the pool builds the next
	// Loopback is up. The namespace belongs to a user namespace outside
	// the box's: the box holds no capability over it, and the kernel will
	// not even name its owner to the box (NS_GET_USERNS).
	const tries = `python3 -c '
import fcntl, os, socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname()); print("loopback up")
try:
    fcntl.ioctl(os.open("/proc/self/ns/net", os.O_RDONLY), 0xb701)
    print("owner in reach")
except PermissionError:
    print("owner out of reach")
'`
	// The first box built ahead makes the namespace, in its own user
	// namespace; the next ones join it.
	rep, first := run(736, "", "true")
	if !claimed(rep) || netOf(first) == hostNet {
		t.Fatalf("claimed %v, a box of its own network in namespace %s (the host's: %s)", claimed(rep), netOf(first), hostNet)
	}
	rep, second := run(736, "", tries)
	if !claimed(rep) || netOf(second) != netOf(first) || outOf(second) != "loopback up\nowner out of reach\n" {
		t.Errorf("the next run (claimed %v) has network namespace %s, the one before %s; output %q",
			claimed(rep), netOf(second), netOf(first), outOf(second))
	}
	if _, other := run(737, "", "true"); netOf(other) == netOf(first) {
		t.Errorf("box 737 ran in box 736's network namespace %s", netOf(other))
	}
	if _, host := run(736, "host", "true"); netOf(host) != hostNet {
		t.Errorf("a run of the host network ran in %s, not the host's %s", netOf(host), hostNet)
	}
	run(736, "", "true")
	_, kept := run(736, "", "true")
	// The server side closes first: its socket stays in TIME_WAIT.
	const timeWait = `python3 -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", 47311)); s.listen()
c = socket.create_connection(("127.0.0.1", 47311)); a, _ = s.accept()
a.close(); c.recv(1); c.close(); print("closed")
'`
	if _, out := run(736, "", timeWait); netOf(out) != netOf(kept) || outOf(out) != "closed\n" {
		t.Fatalf("in namespace %s (kept: %s): %q", netOf(out), netOf(kept), outOf(out))
	}
	if _, after := run(736, "", timeWait); netOf(after) == netOf(kept) || outOf(after) != "closed\n" {
		t.Errorf("after a run that left a socket in TIME_WAIT: namespace %s (that run's %s), %q", netOf(after), netOf(kept), outOf(after))
	}
	// That run left its socket too: the namespace the next box joins is
	// yet another, and stays with the id's boxes again.
	_, next := run(736, "", "true")
	if rep, again := run(736, "", "true"); !claimed(rep) || netOf(again) != netOf(next) {
		t.Errorf("claimed %v, namespace %s, the run before's %s", claimed(rep), netOf(again), netOf(next))
	}
}

package isolate

// A network namespace kept between the runs of a persistent box id in the
// service (pool_ahead.go). A fresh network namespace is the dearest part
// of a box: about 0.55 ms of CPU to make (its sysctl tables, loopback
// device) and to free (a kernel worker, after an RCU grace period), on
// every run. The first box the pool builds ahead for an id makes one, as
// any box does, inside its own user namespace; the service keeps it, and
// the id's next boxes join it instead of making their own.
//
// Each later box has a user namespace of its own, which holds no
// capability over the kept namespace (its owner is the first box's user
// namespace, where nothing runs once that box has ended), and no box's
// program ever held one (the box user, its bounding set empty): what the
// first box's init set (loopback up) is all that was ever set in it. What
// a run leaves in it once all its processes are gone is checked before
// the next run of the chain gets it: TCP sockets in any state (TIME_WAIT
// and the like would hold their ports), unix sockets with a name still
// alive in a cycle of descriptors in flight; where SCTP is loaded (its
// associations outlive their sockets), always. Any of them, and the
// namespace goes with the box; the next box makes a fresh one. What stays
// are counters (the loopback's packets, /proc/net/snmp), seen only by the
// same box id's next run, which sees its box/ directory too.

import (
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// boxNetns is a kept network namespace, with the files that show what
// sockets it holds (its own /proc/net files: they keep showing it).
type boxNetns struct {
	ns *os.File
	// sockstat, sockstat6 count its TCP sockets (sockstat6 is nil
	// without IPv6); unix lists its unix sockets. (The kernel's table of
	// TCP sockets is the host's: /proc/net/tcp walks all of it.)
	sockstat, sockstat6, unix *os.File
}

// boxNetnsOf takes the network namespace of a box built ahead (pid: its
// PID 1, which waits for a command): not the host's, and PID 1 still
// there once it is open. Nil when it cannot.
func boxNetnsOf(pid int, init *boxinit.Proc) *boxNetns {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	n := &boxNetns{}
	var err error
	if n.ns, err = os.Open(dir + "ns/net"); err == nil {
		if n.sockstat, err = os.Open(dir + "net/sockstat"); err == nil {
			if n.unix, err = os.Open(dir + "net/unix"); err == nil {
				n.sockstat6, err = os.Open(dir + "net/sockstat6")
				if errors.Is(err, os.ErrNotExist) {
					err = nil // no IPv6
				}
			}
		}
	}
	if err != nil || !init.Alive() || ownedByHost(n.ns) {
		n.Close()
		return nil
	}
	return n
}

// ownedByHost says whether the namespace ns belongs to the host's user
// namespace (or its owner cannot be told).
func ownedByHost(ns *os.File) bool {
	owner, err := unix.IoctlRetInt(int(ns.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		return true
	}
	defer unix.Close(owner)
	var o, host unix.Stat_t
	return unix.Fstat(owner, &o) != nil || unix.Stat("/proc/self/ns/user", &host) != nil ||
		(o.Dev == host.Dev && o.Ino == host.Ino)
}

// fd is the namespace's descriptor, for the fork of an init that joins it.
func (n *boxNetns) fd() int { return int(n.ns.Fd()) }

// unused says whether nothing a run could reach or that holds a port is
// left in the namespace (see above): no TCP socket (listening, open,
// closing, in TIME_WAIT), no unix socket with a name, and SCTP not loaded.
// Call it once no process of the last run is left; the next box may be
// in it already (its PID 1's unix sockets have no names).
func (n *boxNetns) unused() bool {
	if _, err := os.Stat("/proc/self/net/sctp"); err == nil {
		return false
	}
	var buf [8 << 10]byte
	read := func(f *os.File) (string, bool) {
		if f == nil {
			return "", true
		}
		k, err := f.ReadAt(buf[:], 0)
		return string(buf[:k]), (err == nil || err == io.EOF) && k < len(buf)
	}
	stat, ok := read(n.sockstat)
	if !ok {
		return false
	}
	stat6, ok := read(n.sockstat6)
	if !ok {
		return false
	}
	list, ok := read(n.unix)
	return ok && noSocketsLeft(stat, stat6, list)
}

// noSocketsLeft reads a network namespace's /proc/net/sockstat,
// sockstat6 ("": no IPv6) and unix (see unused).
func noSocketsLeft(sockstat, sockstat6, unixList string) bool {
	if !countsZero(sockstat, "TCP:", "inuse", "tw") || (sockstat6 != "" && !countsZero(sockstat6, "TCP6:", "inuse")) {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(unixList, "\n"), "\n")[1:] {
		if len(strings.Fields(l)) > 7 { // a socket's line ends with its name
			return false
		}
	}
	return true
}

// countsZero says whether stat's line of label has each of keys followed
// by 0.
func countsZero(stat, label string, keys ...string) bool {
	for _, line := range strings.Split(stat, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != label {
			continue
		}
		for _, key := range keys {
			i := slices.Index(f, key)
			if i < 0 || i+1 >= len(f) || f[i+1] != "0" {
				return false
			}
		}
		return true
	}
	return false
}

// Close lets go of the namespace (the kernel frees it once no box is in
// it either). Nil-safe.
func (n *boxNetns) Close() {
	if n == nil {
		return
	}
	for _, f := range []*os.File{n.sockstat, n.sockstat6, n.unix, n.ns} {
		if f != nil {
			f.Close()
		}
	}
}

package caller

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Account is whose budget c's requests count against (the Ledger's
// sessions, held bytes and background commands): its uid, or the uid of
// the user who owns the subordinate range its uid is in (SubUIDFile: a
// user becomes any uid of its range with newuidmap, and stays one caller
// for it), every TCP caller the token's ("tcp"), every queue job the
// queue's. A range owned by root or by the service's own user is not
// followed: such subordinate uids are their own accounts. Rights are
// never the account's: what c may read, run or reach is its own uid's.
func (c Caller) Account() string {
	switch c.Via {
	case TCP:
		return "tcp"
	case Queue:
		return "queue"
	}
	return fmt.Sprintf("uid:%d", subOwners.owner(c.UID))
}

// SubUIDFile is where subordinate ranges are read from (shadow's
// name:start:count lines, the user by name or number); tests point it
// at a file of their own (SetSubUIDFile).
var SubUIDFile = "/etc/subuid"

// SetSubUIDFile reads subordinate ranges from path from now on.
func SetSubUIDFile(path string) {
	subOwners.mu.Lock()
	defer subOwners.mu.Unlock()
	SubUIDFile = path
	subOwners.stamp = fileStamp{}
}

// subOwners is the ranges of SubUIDFile, read again when it changes.
var subOwners ranges

type ranges struct {
	mu     sync.Mutex
	stamp  fileStamp
	owners []subRange
}

type subRange struct{ start, count, owner int }

type fileStamp struct {
	ino, size int64
	mtime     time.Time
	read      bool
}

// owner is the uid whose account uid's is.
func (r *ranges) owner(uid int) int {
	if uid < 0 {
		return uid
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refresh()
	for _, s := range r.owners {
		if uid >= s.start && uid-s.start < s.count {
			return s.owner
		}
	}
	return uid
}

// refresh reads the file again if it changed (r.mu held).
func (r *ranges) refresh() {
	var st fileStamp
	if fi, err := os.Stat(SubUIDFile); err == nil {
		st = fileStamp{size: fi.Size(), mtime: fi.ModTime(), read: true}
		if sys, ok := fi.Sys().(interface{ Ino() uint64 }); ok {
			st.ino = int64(sys.Ino())
		}
	}
	if st == r.stamp && st.read {
		return
	}
	r.stamp = st
	r.owners = nil
	data, err := os.ReadFile(SubUIDFile)
	if err != nil {
		return
	}
	r.owners = parseSubUIDs(data, lookupUID)
}

// lookupUID is the uid of a user named in a subordinate id file.
func lookupUID(name string) (int, bool) {
	if n, err := strconv.Atoi(name); err == nil {
		return n, n >= 0
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(u.Uid)
	return n, err == nil
}

// parseSubUIDs reads name:start:count lines, the owner by name or uid
// (lookup); ranges of root and of the service's user are left out.
func parseSubUIDs(data []byte, lookup func(string) (int, bool)) []subRange {
	var out []subRange
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) != 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		start, err1 := strconv.ParseUint(f[1], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		owner, ok := lookup(f[0])
		if err1 != nil || err2 != nil || count < 1 || !ok || owner == 0 || owner == serviceUID {
			continue
		}
		out = append(out, subRange{int(start), int(count), owner})
	}
	return out
}

package isolate

import (
	"os"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/internal/cgtest"
)

// A one-shot run's Host sweeps at its first box; a long-lived one at most
// once per sweepInterval, however many boxes it makes.
func TestSweepDueSpacesSweeps(t *testing.T) {
	h := &Host{}
	now := time.Now()
	if !h.sweepDue(now) {
		t.Fatal("a Host's first box did not sweep")
	}
	if h.sweepDue(now) || h.sweepDue(now.Add(sweepInterval-time.Millisecond)) {
		t.Fatal("a box made within sweepInterval of a sweep swept again")
	}
	if !h.sweepDue(now.Add(sweepInterval)) {
		t.Fatal("no sweep once sweepInterval had passed")
	}
	h.lastSweep.Store(now.UnixNano())
	swept := 0
	for i := 0; i < 8; i++ { // boxes made at once by several runs
		if h.sweepDue(now.Add(sweepInterval + time.Second)) {
			swept++
		}
	}
	if swept != 1 {
		t.Fatalf("%d of 8 boxes made at once swept, want 1", swept)
	}
}

// A sweep removes a box cgroup of its root that no run claims, even while
// a run under another cgroup root holds the box's id (the host-wide lock);
// it leaves a cgroup a live run of its own root claims, though the run is
// in this very process.
func TestSweepRemovesWhatNoRunOfItsRootClaims(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: cgroups")
	}
	root, _ := cgtest.Root(t, "isolate-claims-test")
	h := &Host{Config: &Config{CgroupRoot: root}}
	m, err := h.Cgroups()
	if err != nil || m == nil {
		t.Skipf("no cgroups here: %v", err)
	}
	const staleID, liveID = MaxBoxID - 1, MaxBoxID - 2
	// What a killed supervisor left, its id since taken by a run elsewhere.
	stale, err := m.Create(cgroupName(staleID), cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Destroy() // (its files: the sweep removes its directory)
	elsewhere, ok, err := tryLockBox(LockDir, staleID)
	if err != nil || !ok {
		t.Fatalf("lock box %d: %v %v", staleID, ok, err)
	}
	defer elsewhere.release()
	live, err := h.createBoxCgroup(m, liveID, cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	sweepStale(m, LockDir, -1)
	if got := m.Boxes(); len(got) != 1 || got[0] != cgroupName(liveID) {
		t.Fatalf("after the sweep: %v, want only %s", got, cgroupName(liveID))
	}
	if err := live.Destroy(); err != nil {
		t.Fatal(err)
	}
	claims, err := openCgroupClaims(LockDir, m)
	if err != nil {
		t.Fatal(err)
	}
	defer claims.Close()
	if free, err := claimCgroup(claims, liveID, false); !free || err != nil {
		t.Fatalf("box %d's claim outlived its cgroup: %v %v", liveID, free, err)
	}
}

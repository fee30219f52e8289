package caller

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Holds are counted per account and in all, refused past either bound
// with nothing held, shrunk and given back.
func TestLedgerHolds(t *testing.T) {
	l := NewLedger(Budget{Bytes: 100, TotalBytes: 150, Background: 1})
	a, err := l.Hold("uid:1", Usage{Bytes: 60, Background: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold("uid:1", Usage{Bytes: 50}); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("past the account's bytes: %v", err)
	}
	if _, err := l.Hold("uid:1", Usage{Bytes: 1, Background: 1}); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("past the account's background commands: %v", err)
	}
	b, err := l.Hold("uid:2", Usage{Bytes: 90})
	if _, err2 := l.Hold("uid:3", Usage{Bytes: 1}); err != nil || !errors.Is(err2, ErrOverBudget) {
		t.Fatalf("the total: %v, %v", err, err2)
	}
	a.Shrink(10)
	a.EndBackground()
	if u := l.Usage("uid:1"); u != (Usage{Bytes: 10}) {
		t.Errorf("shrunk: %+v", u)
	}
	a.Release()
	a.Release()
	b.Release()
	if total, refused := l.Total(); total != (Usage{}) || refused != 3 {
		t.Errorf("all released: %+v, %d refused", total, refused)
	}
}

// A hold that alone is beyond a bound is refused as never fitting, which
// one that fits once others let go is not; a refusal of background
// commands says so.
func TestLedgerNeverFits(t *testing.T) {
	l := NewLedger(Budget{Bytes: 100, TotalBytes: 80, Background: 1})
	var ob *OverBudget
	if _, err := l.Hold("uid:1", Usage{Bytes: 120}); !errors.Is(err, ErrNeverFits) || !errors.As(err, &ob) || ob.Flag != "--max-held-bytes-per-caller" {
		t.Fatalf("beyond the account's bytes alone: %v", err)
	}
	if _, err := l.Hold("uid:1", Usage{Bytes: 90}); !errors.Is(err, ErrNeverFits) || !errors.As(err, &ob) || ob.Flag != "--max-held-bytes" {
		t.Fatalf("beyond the total alone: %v", err)
	}
	h, err := l.Hold("uid:1", Usage{Bytes: 50, Background: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if _, err := l.Hold("uid:2", Usage{Bytes: 50}); !errors.Is(err, ErrOverBudget) || errors.Is(err, ErrNeverFits) {
		t.Fatalf("beyond the total beside another account's hold: %v", err)
	}
	if _, err := l.Hold("uid:1", Usage{Background: 1}); !errors.As(err, &ob) || !ob.Background || ob.Never {
		t.Fatalf("beyond the account's background commands: %v", err)
	}
}

// A hold grows within the budget; past it the growth is refused and the
// hold keeps what it had.
func TestLedgerHoldGrows(t *testing.T) {
	l := NewLedger(Budget{Bytes: 100, TotalBytes: 150})
	h, err := l.Hold("uid:1", Usage{Bytes: 40})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Grow(50); err != nil {
		t.Fatal(err)
	}
	if err := h.Grow(20); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("past the account's bytes: %v", err)
	}
	if u := l.Usage("uid:1"); u.Bytes != 90 || h.Held().Bytes != 90 {
		t.Errorf("after a refused growth: %+v, the hold %+v", u, h.Held())
	}
	h.Shrink(30)
	h.Release()
	if total, _ := l.Total(); total != (Usage{}) {
		t.Errorf("released: %+v", total)
	}
}

// Quotas: runs and CPU time per account and window, by kind of caller
// and group; root has none; a new window starts afresh.
func TestLedgerQuotas(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const judges = 4242
	l := NewLedger(Budget{Quotas: Quotas{Window: time.Minute, Default: Quota{Runs: 3, CPU: 2 * time.Second},
		Groups: []GroupQuota{{GID: judges, Quota: Quota{Runs: 100}}}, TCP: &Quota{Runs: 1}}})
	l.now = func() time.Time { return now }
	user := Caller{Via: API, UID: 1000, GID: 1000}
	judge := Caller{Via: Handover, UID: 1001, GID: 1001, Groups: []int{judges}}
	if err := l.StartRuns(user, 2); err != nil {
		t.Fatal(err)
	}
	var oq *OverQuota
	if err := l.StartRuns(user, 2); !errors.As(err, &oq) || oq.What != "runs" || oq.RetrySeconds() != 60 {
		t.Fatalf("2 more runs of 3: %v", err)
	}
	l.ChargeCPU(user, 2*time.Second)
	now = now.Add(30 * time.Second)
	if err := l.StartRuns(user, 1); !errors.As(err, &oq) || oq.What != "CPU time" || oq.RetrySeconds() != 30 {
		t.Fatalf("after the window's CPU time: %v", err)
	}
	for i := range 50 {
		if err := l.StartRuns(judge, 2); err != nil {
			t.Fatalf("the group's quota, run %d: %v", i, err)
		}
	}
	if err := l.StartRuns(Caller{Via: TCP, UID: -1}, 1); err != nil {
		t.Fatal(err)
	}
	if err := l.StartRuns(Caller{Via: TCP, UID: -1}, 1); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("the token's second run: %v", err)
	}
	if err := l.StartRuns(Caller{Via: API, UID: 0}, 1000); err != nil {
		t.Fatalf("root: %v", err)
	}
	now = now.Add(30 * time.Second)
	if err := l.StartRuns(user, 3); err != nil {
		t.Fatalf("a new window: %v", err)
	}
	if runs, cpu := l.Used(user.Account()); runs != 3 || cpu != 0 {
		t.Errorf("used in the new window: %d runs, %v", runs, cpu)
	}
}

// A subordinate uid's account is the user's who owns its range; a range
// of root's is not followed; TCP and the queue are one account each.
func TestAccount(t *testing.T) {
	file := filepath.Join(t.TempDir(), "subuid")
	os.WriteFile(file, []byte("# ranges\n1000:100000:65536\nroot:200000:65536\nbad line\n"), 0o644)
	SetSubUIDFile(file)
	defer SetSubUIDFile("/etc/subuid")
	for _, c := range []struct {
		who  Caller
		want string
	}{
		{Caller{Via: API, UID: 100000}, "uid:1000"},
		{Caller{Via: Handover, UID: 165535}, "uid:1000"},
		{Caller{Via: API, UID: 165536}, "uid:165536"},
		{Caller{Via: API, UID: 200001}, "uid:200001"},
		{Caller{Via: API, UID: 1000}, "uid:1000"},
		{Caller{Via: TCP, UID: 100000}, "tcp"},
		{QueueJob, "queue"},
	} {
		if got := c.who.Account(); got != c.want {
			t.Errorf("%+v: %s, want %s", c.who, got, c.want)
		}
	}
}

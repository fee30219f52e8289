package caller

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Quota is what one account may use in a window (0: no bound): runs
// started (each command of a request, a session's command, a handed-over
// run) and CPU time (what their reports measured).
type Quota struct {
	Runs int64
	CPU  time.Duration
}

// Quotas are the service's quotas: one window for all, a quota per
// account by kind of caller. Root (the operator) has none.
type Quotas struct {
	Window time.Duration // 0: no quotas
	// Default is every account's but those below.
	Default Quota
	// Groups are quotas of the members of a group (--quota group:NAME=…),
	// the first that matches: a uid's account takes its owner's groups
	// as the caller has them.
	Groups []GroupQuota
	// TCP is the token's, Queue the queue's (nil: Default).
	TCP, Queue *Quota
}

// GroupQuota is the quota of a group's members.
type GroupQuota struct {
	GID int
	Quota
}

// For is c's quota, and whether it has one.
func (q *Quotas) For(c Caller) (Quota, bool) {
	if q == nil || q.Window <= 0 || c.Root() {
		return Quota{}, false
	}
	pick := q.Default
	switch c.Via {
	case TCP:
		if q.TCP != nil {
			pick = *q.TCP
		}
	case Queue:
		if q.Queue != nil {
			pick = *q.Queue
		}
	default:
		if i := slices.IndexFunc(q.Groups, func(g GroupQuota) bool { return c.InGroup(g.GID) }); i >= 0 {
			pick = q.Groups[i].Quota
		}
	}
	return pick, pick != (Quota{})
}

// OverQuota is a run the account's quota has no room for in this
// window: HTTP 429 with Retry-After, the handover's exit status 2.
type OverQuota struct {
	What       string
	Limit      string
	Flag       string
	RetryAfter time.Duration
}

func (e *OverQuota) Error() string {
	return fmt.Sprintf("over quota: this caller's %s in this window reached %s (%s); try again in %s",
		e.What, e.Limit, e.Flag, e.RetryAfter.Round(time.Second))
}

// Is makes errors.Is(err, ErrOverBudget) true: a quota is a budget over time.
func (e *OverQuota) Is(target error) bool { return target == ErrOverBudget }

// RetrySeconds is Retry-After's value: whole seconds, at least 1.
func (e *OverQuota) RetrySeconds() int { return max(1, int(math.Ceil(e.RetryAfter.Seconds()))) }

// window is what one account used in its current window.
type window struct {
	start time.Time
	runs  int64
	cpu   time.Duration
}

// StartRuns counts n runs of c against its quota, or refuses them all
// (*OverQuota) when the window has no room: its runs would pass the
// quota, or its CPU time reached it.
func (l *Ledger) StartRuns(c Caller, n int) error {
	if l == nil {
		return nil
	}
	q, ok := l.budget.Quotas.For(c)
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.windowLocked(c.Account())
	retry := w.start.Add(l.budget.Quotas.Window).Sub(l.now())
	switch {
	case q.Runs > 0 && w.runs+int64(n) > q.Runs:
		l.refused++
		return &OverQuota{What: "runs", Limit: fmt.Sprint(q.Runs), Flag: "--quota", RetryAfter: retry}
	case q.CPU > 0 && w.cpu >= q.CPU:
		l.refused++
		return &OverQuota{What: "CPU time", Limit: q.CPU.String(), Flag: "--quota", RetryAfter: retry}
	}
	w.runs += int64(n)
	return nil
}

// ChargeCPU counts cpu, which a run of c's took, in its window.
func (l *Ledger) ChargeCPU(c Caller, cpu time.Duration) {
	if l == nil || cpu <= 0 {
		return
	}
	if _, ok := l.budget.Quotas.For(c); !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windowLocked(c.Account()).cpu += cpu
}

// Used is what account used in its current window.
func (l *Ledger) Used(account string) (runs int64, cpu time.Duration) {
	if l == nil {
		return 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.windows[account]; w != nil && l.now().Sub(w.start) < l.budget.Quotas.Window {
		return w.runs, w.cpu
	}
	return 0, 0
}

// windowLocked is account's current window, a new one when the last has
// passed (l.mu held). Windows of accounts that used nothing for a
// window are forgotten as they are found.
func (l *Ledger) windowLocked(account string) *window {
	now := l.now()
	if l.windows == nil {
		l.windows = map[string]*window{}
	}
	w := l.windows[account]
	if w == nil || now.Sub(w.start) >= l.budget.Quotas.Window {
		if len(l.windows) > 1024 {
			for a, x := range l.windows {
				if now.Sub(x.start) >= l.budget.Quotas.Window {
					delete(l.windows, a)
				}
			}
		}
		w = &window{start: now}
		l.windows[account] = w
	}
	return w
}

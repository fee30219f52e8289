package caller

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Ledger is what each caller holds in the service at once, by account
// (Caller.Account: a subordinate uid pays as the user who owns its range,
// every TCP caller as the token's): the bytes the service keeps for it
// (the captured output of its session commands, kept until the session
// drops their records) and the commands it runs in the background of its
// sessions. Every front end asks the ledger before it holds anything for
// a caller (Hold) and gives it back when it lets it go (Hold.Release);
// what a request was granted and what its caller holds are read from the
// same place (Usage). The service's memory for what callers keep is at
// most Budget.TotalBytes, and one caller's at most Budget.Bytes.
type Ledger struct {
	budget Budget

	mu      sync.Mutex
	held    map[string]Usage
	total   Usage
	refused int64
	windows map[string]*window // quotas' windows, by account
	now     func() time.Time
}

// Budget is what one account may hold at once, and all accounts together
// (0: no bound).
type Budget struct {
	Bytes      int64 // bytes the service holds for one account (--max-held-bytes-per-caller)
	TotalBytes int64 // for all accounts together (--max-held-bytes)
	Background int   // background commands one account runs at once (--max-background-per-caller)
	// Quotas bound what an account uses over time (--quota).
	Quotas Quotas
}

// Defaults of a service's budget.
const (
	DefaultHeldBytes      = 64 << 20
	DefaultTotalHeldBytes = 512 << 20
	DefaultBackground     = 16
)

// Usage is what an account holds.
type Usage struct {
	Bytes      int64 `json:"bytes"`
	Background int   `json:"background"`
}

// OverBudget is a hold the ledger refused: what, the bound and the flag
// that sets it. Front ends answer it as busy (HTTP 429, Retry-After): it
// passes once the caller lets go of what it holds. One that asks more
// than the bound alone (Never) passes never: front ends answer it as a
// bad request (HTTP 400).
type OverBudget struct {
	What  string // "bytes held for this caller", ...
	Asked int64
	Held  int64
	Limit int64
	Flag  string
	// Never: what was asked is beyond the bound by itself, whatever the
	// caller lets go.
	Never bool
	// Background: the bound refused is the background commands', not
	// the bytes'.
	Background bool
}

func (e *OverBudget) Error() string {
	if e.Never {
		return fmt.Sprintf("over budget whatever is let go: %d alone is beyond %s, %d (%s)", e.Asked, e.What, e.Limit, e.Flag)
	}
	return fmt.Sprintf("over budget: %s would be %d, beyond %d (%s); let go of what it holds (end commands, delete sessions) and try again",
		e.What, e.Held+e.Asked, e.Limit, e.Flag)
}

// ErrOverBudget matches every *OverBudget with errors.Is; ErrNeverFits
// those that are Never.
var (
	ErrOverBudget = errors.New("over budget")
	ErrNeverFits  = errors.New("over budget whatever is let go")
)

// Is makes errors.Is(err, ErrOverBudget) true, and errors.Is(err,
// ErrNeverFits) for one that is Never.
func (e *OverBudget) Is(target error) bool {
	return target == ErrOverBudget || target == ErrNeverFits && e.Never
}

// NewLedger is a ledger bounded by b.
func NewLedger(b Budget) *Ledger { return &Ledger{budget: b, held: map[string]Usage{}, now: time.Now} }

// Budget is the ledger's bounds.
func (l *Ledger) Budget() Budget { return l.budget }

// Hold is what one request, command or record holds for its account;
// Release gives it back (once; more calls do nothing).
type Hold struct {
	l       *Ledger
	account string
	u       Usage
}

// Hold takes u for account, or refuses it (*OverBudget) leaving nothing
// held: Never when u alone is beyond Budget.Bytes or Budget.TotalBytes.
// A nil ledger holds nothing and refuses nothing.
func (l *Ledger) Hold(account string, u Usage) (*Hold, error) {
	h := &Hold{l: l, account: account}
	if l == nil {
		return h, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkLocked(account, u); err != nil {
		return nil, err
	}
	l.add(account, u, 1)
	h.u = u
	return h, nil
}

// checkLocked refuses u for account beyond the budget (l.mu held).
func (l *Ledger) checkLocked(account string, u Usage) error {
	have := l.held[account]
	switch b := l.budget; {
	case u.Bytes > 0 && b.Bytes > 0 && u.Bytes > b.Bytes:
		l.refused++
		return &OverBudget{What: "the bytes the service holds for one caller", Asked: u.Bytes, Held: have.Bytes, Limit: b.Bytes, Flag: "--max-held-bytes-per-caller", Never: true}
	case u.Bytes > 0 && b.TotalBytes > 0 && u.Bytes > b.TotalBytes:
		l.refused++
		return &OverBudget{What: "the bytes the service holds for all its callers", Asked: u.Bytes, Held: l.total.Bytes, Limit: b.TotalBytes, Flag: "--max-held-bytes", Never: true}
	case u.Bytes > 0 && b.Bytes > 0 && have.Bytes+u.Bytes > b.Bytes:
		l.refused++
		return &OverBudget{What: "the bytes the service holds for this caller", Asked: u.Bytes, Held: have.Bytes, Limit: b.Bytes, Flag: "--max-held-bytes-per-caller"}
	case u.Bytes > 0 && b.TotalBytes > 0 && l.total.Bytes+u.Bytes > b.TotalBytes:
		l.refused++
		return &OverBudget{What: "the bytes the service holds for all its callers", Asked: u.Bytes, Held: l.total.Bytes, Limit: b.TotalBytes, Flag: "--max-held-bytes"}
	case u.Background > 0 && b.Background > 0 && have.Background+u.Background > b.Background:
		l.refused++
		return &OverBudget{What: "this caller's background commands", Asked: int64(u.Background), Held: int64(have.Background), Limit: int64(b.Background), Flag: "--max-background-per-caller", Background: true}
	}
	return nil
}

// Grow adds bytes to what h holds, or refuses them (*OverBudget) as Hold
// does, h unchanged: what a request takes as it goes (a copied-out file
// put inline in its answer).
func (h *Hold) Grow(bytes int64) error {
	if h == nil || h.l == nil || bytes <= 0 {
		return nil
	}
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	u := Usage{Bytes: bytes}
	if err := h.l.checkLocked(h.account, u); err != nil {
		return err
	}
	h.l.add(h.account, u, 1)
	h.u.Bytes += bytes
	return nil
}

// add counts u (sign 1) or takes it off (-1) (l.mu held).
func (l *Ledger) add(account string, u Usage, sign int) {
	have := l.held[account]
	have.Bytes += int64(sign) * u.Bytes
	have.Background += sign * u.Background
	l.total.Bytes += int64(sign) * u.Bytes
	l.total.Background += sign * u.Background
	if have == (Usage{}) {
		delete(l.held, account)
	} else {
		l.held[account] = have
	}
}

// Shrink keeps at most bytes of what h holds (the rest is given back):
// a command's output reserved at its limit, kept at its length once it
// ended.
func (h *Hold) Shrink(bytes int64) {
	if h == nil || h.l == nil {
		return
	}
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if bytes < 0 || bytes >= h.u.Bytes {
		return
	}
	h.l.add(h.account, Usage{Bytes: h.u.Bytes - bytes}, -1)
	h.u.Bytes = bytes
}

// EndBackground gives back the background command h counted, keeping its
// bytes: the command ended, its record stays.
func (h *Hold) EndBackground() {
	if h == nil || h.l == nil {
		return
	}
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if h.u.Background > 0 {
		h.l.add(h.account, Usage{Background: h.u.Background}, -1)
		h.u.Background = 0
	}
}

// Release gives back everything h holds.
func (h *Hold) Release() {
	if h == nil || h.l == nil {
		return
	}
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	h.l.add(h.account, h.u, -1)
	h.u = Usage{}
}

// Held is what h holds now.
func (h *Hold) Held() Usage {
	if h == nil || h.l == nil {
		return Usage{}
	}
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	return h.u
}

// Usage is what account holds now.
func (l *Ledger) Usage(account string) Usage {
	if l == nil {
		return Usage{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[account]
}

// Total is what all accounts hold now, and the holds refused so far.
func (l *Ledger) Total() (Usage, int64) {
	if l == nil {
		return Usage{}, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.refused
}

package server

import (
	"context"
	"errors"
	"sync"
)

// errQueueFull is a request beyond the queue: the client gets 429.
var errQueueFull = errors.New("the queue is full")

// queue admits requests by the number of commands they run at once (an
// interactive task needs all its boxes together), at most parallel
// commands in all, with at most depth requests waiting behind them. Of
// the waiters, each account's are served first come first served, and a
// freed slot goes to the account that runs the fewest commands: one
// caller's many requests do not keep another's waiting behind them all.
type queue struct {
	parallel int
	depth    int

	mu      sync.Mutex
	running int // commands
	waiting []*waiter
	by      map[string]int    // commands running, by account
	served  map[string]uint64 // when each account was last let in (turn), while it runs or waits
	turn    uint64
}

type waiter struct {
	n       int
	account string
	ready   chan struct{}
}

func newQueue(parallel, depth int) *queue {
	return &queue{parallel: parallel, depth: depth, by: map[string]int{}, served: map[string]uint64{}}
}

// acquire waits for n slots; the caller releases them with release(n).
func (q *queue) acquire(ctx context.Context, n int) error { return q.acquireFor(ctx, "", n) }

// acquireFor waits for n slots of account's; the caller releases them
// with releaseFor(account, n).
func (q *queue) acquireFor(ctx context.Context, account string, n int) error {
	q.mu.Lock()
	if len(q.waiting) == 0 && q.running+n <= q.parallel {
		q.running += n
		q.by[account] += n
		q.turn++
		q.served[account] = q.turn
		q.mu.Unlock()
		return nil
	}
	if len(q.waiting) >= q.depth {
		q.mu.Unlock()
		return errQueueFull
	}
	w := &waiter{n: n, account: account, ready: make(chan struct{})}
	q.waiting = append(q.waiting, w)
	q.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		q.mu.Lock()
		defer q.mu.Unlock()
		select {
		case <-w.ready: // admitted meanwhile: give the slots back
			q.takeOffLocked(account, n)
			q.admitLocked()
		default:
			q.removeLocked(w)
			q.forgetLocked(account)
			q.admitLocked() // those behind it may fit now
		}
		return context.Cause(ctx)
	}
}

func (q *queue) release(n int) { q.releaseFor("", n) }

func (q *queue) releaseFor(account string, n int) {
	q.mu.Lock()
	q.takeOffLocked(account, n)
	q.admitLocked()
	q.mu.Unlock()
}

func (q *queue) takeOffLocked(account string, n int) {
	q.running -= n
	if q.by[account] -= n; q.by[account] <= 0 {
		delete(q.by, account)
	}
	q.forgetLocked(account)
}

// forgetLocked forgets account's turn once it neither runs nor waits.
func (q *queue) forgetLocked(account string) {
	if q.by[account] > 0 {
		return
	}
	for _, w := range q.waiting {
		if w.account == account {
			return
		}
	}
	delete(q.served, account)
}

// admitLocked lets waiters in while the next fits: the first waiter of
// the account that runs the fewest commands (among equals, the one let
// in longest ago).
func (q *queue) admitLocked() {
	for len(q.waiting) > 0 {
		next := -1
		seen := map[string]bool{}
		for i, w := range q.waiting {
			if seen[w.account] {
				continue
			}
			seen[w.account] = true
			if next < 0 {
				next = i
				continue
			}
			a, b := w.account, q.waiting[next].account
			if q.by[a] < q.by[b] || q.by[a] == q.by[b] && q.served[a] < q.served[b] {
				next = i
			}
		}
		w := q.waiting[next]
		if q.running+w.n > q.parallel {
			return
		}
		q.waiting = append(q.waiting[:next:next], q.waiting[next+1:]...)
		q.running += w.n
		q.by[w.account] += w.n
		q.turn++
		q.served[w.account] = q.turn
		close(w.ready)
	}
}

func (q *queue) removeLocked(w *waiter) {
	for i, x := range q.waiting {
		if x == w {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return
		}
	}
}

// lengths are the commands running and the requests waiting.
func (q *queue) lengths() (running, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running, len(q.waiting)
}

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
// commands in all, first come first served, with at most depth requests
// waiting behind them.
type queue struct {
	parallel int
	depth    int

	mu      sync.Mutex
	running int // commands
	waiting []*waiter
}

type waiter struct {
	n     int
	ready chan struct{}
}

func newQueue(parallel, depth int) *queue { return &queue{parallel: parallel, depth: depth} }

// acquire waits for n slots; the caller releases them with release(n).
func (q *queue) acquire(ctx context.Context, n int) error {
	q.mu.Lock()
	if len(q.waiting) == 0 && q.running+n <= q.parallel {
		q.running += n
		q.mu.Unlock()
		return nil
	}
	if len(q.waiting) >= q.depth {
		q.mu.Unlock()
		return errQueueFull
	}
	w := &waiter{n: n, ready: make(chan struct{})}
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
			q.running -= n
			q.admitLocked()
		default:
			q.removeLocked(w)
			q.admitLocked() // those behind it may fit now
		}
		return context.Cause(ctx)
	}
}

func (q *queue) release(n int) {
	q.mu.Lock()
	q.running -= n
	q.admitLocked()
	q.mu.Unlock()
}

// admitLocked lets waiters in, in order, while they fit.
func (q *queue) admitLocked() {
	for len(q.waiting) > 0 && q.running+q.waiting[0].n <= q.parallel {
		w := q.waiting[0]
		q.waiting = q.waiting[1:]
		q.running += w.n
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

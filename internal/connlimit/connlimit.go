// Package connlimit bounds the connections a service holds, in all and
// per peer (a uid on a unix socket, counted as the user who owns its
// subordinate range; an address over TCP), and keeps an accept loop
// alive when the process is out of descriptors: a flood of idle
// connections then costs each peer its own share, never the service's
// socket. A connection that waits between requests (Idle) is closed to
// make room for a new one rather than the new one refused: a client's
// keep-alive connections never lock it out.
package connlimit

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/caller"
)

// Defaults of Limits.
const (
	DefaultTotal   = 1024
	DefaultPerPeer = 128
)

// Limits are the most connections held at once: in all, and from one
// peer. 0 takes the default.
type Limits struct {
	Total   int
	PerPeer int
}

func (l Limits) withDefaults() Limits {
	if l.Total <= 0 {
		l.Total = DefaultTotal
	}
	if l.PerPeer <= 0 {
		l.PerPeer = DefaultPerPeer
	}
	return l
}

// Listener is a net.Listener whose Accept closes at once a connection
// beyond the limits, and waits and retries when the process or system is
// out of descriptors or memory instead of failing.
type Listener struct {
	net.Listener
	lim Limits

	mu    sync.Mutex
	total int
	peers map[string]int
	idle  map[*Conn]bool // connections waiting between requests

	// Refused counts connections closed for being beyond a limit;
	// Starved counts accepts that failed for want of descriptors.
	Refused, Starved atomic.Int64
}

// New limits l's connections.
func New(l net.Listener, lim Limits) *Listener {
	return &Listener{Listener: l, lim: lim.withDefaults(), peers: map[string]int{}, idle: map[*Conn]bool{}}
}

// maxBackoff bounds the wait between accepts that failed for want of
// descriptors: a descriptor freed is used within it.
const maxBackoff = time.Second

// Accept returns the next connection within the limits. It fails only
// when the listener is closed (or fails for good).
func (l *Listener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !transient(err) {
				return nil, err
			}
			l.Starved.Add(1)
			backoff = min(max(2*backoff, 5*time.Millisecond), maxBackoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		key, cred := peerKey(c)
		conn := &Conn{Conn: c, Cred: cred, l: l, key: key}
		if !l.take(key) {
			l.Refused.Add(1)
			c.Close()
			continue
		}
		return conn, nil
	}
}

// transient is an accept error that a later accept may not have: out of
// descriptors (EMFILE, ENFILE), of memory, or a connection that was
// aborted before it was taken.
func transient(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM, unix.ECONNABORTED, unix.EINTR, unix.EAGAIN, unix.EPROTO, unix.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// take counts a new connection of key's in, closing an idle one (key's
// own when key is at its limit, any when the listener is at its) to
// make room; false when there is none to close.
func (l *Listener) take(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.total >= l.lim.Total || l.peers[key] >= l.lim.PerPeer {
		own := l.peers[key] >= l.lim.PerPeer
		var victim *Conn
		for c := range l.idle {
			if !own || c.key == key {
				victim = c
				break
			}
		}
		if victim == nil {
			return false
		}
		l.dropLocked(victim)
		// Closed outside the count: its Close gives nothing back twice.
		go victim.Conn.Close()
	}
	l.total++
	l.peers[key]++
	return true
}

// dropLocked takes c out of the count (l.mu held), once.
func (l *Listener) dropLocked(c *Conn) {
	if c.gone {
		return
	}
	c.gone = true
	delete(l.idle, c)
	l.total--
	if l.peers[c.key]--; l.peers[c.key] <= 0 {
		delete(l.peers, c.key)
	}
}

// Idle marks c as waiting between requests (true) or serving one: an
// idle connection is closed when a new one needs its place. An HTTP
// server calls it from its ConnState hook.
func Idle(c net.Conn, idle bool) {
	lc, ok := c.(*Conn)
	if !ok || lc.l == nil {
		return
	}
	l := lc.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc.gone {
		return
	}
	if idle {
		l.idle[lc] = true
	} else {
		delete(l.idle, lc)
	}
}

// Held is the number of connections held now.
func (l *Listener) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Totals are, over ls, the connections held now, those refused, and the
// accepts that found no descriptor.
func Totals(ls []*Listener) (held int, refused, starved int64) {
	for _, l := range ls {
		held += l.Held()
		refused += l.Refused.Load()
		starved += l.Starved.Load()
	}
	return held, refused, starved
}

// peerKey names who is at the other end: the uid the kernel recorded at
// connect on a unix socket (with the credentials it read, nil when it
// could not), the address over TCP.
func peerKey(c net.Conn) (string, *unix.Ucred) {
	switch c := c.(type) {
	case *net.UnixConn:
		var cred *unix.Ucred
		if raw, err := c.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
			})
		}
		if cred == nil {
			return "uid -1", nil
		}
		// A subordinate uid is its owner's: one share for both.
		return caller.Caller{Via: caller.API, UID: int(cred.Uid)}.Account(), cred
	case *net.TCPConn:
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			return "ip " + a.IP.String(), nil
		}
	}
	return c.RemoteAddr().String(), nil
}

// Conn is an accepted connection; closing it gives its place back.
type Conn struct {
	net.Conn
	// Cred is the peer's credentials on a unix socket as the kernel
	// recorded them at connect (SO_PEERCRED), read once for the limits;
	// nil over TCP, or when they could not be read.
	Cred *unix.Ucred
	l    *Listener
	key  string
	gone bool // out of the count (l.mu)
}

// NetConn is the connection as accepted (a *net.UnixConn or
// *net.TCPConn), for what needs its type (peer credentials, descriptors).
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Close closes the connection and gives its place back.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.dropLocked(c)
	c.l.mu.Unlock()
	return err
}

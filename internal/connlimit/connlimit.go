// Package connlimit bounds the connections a service holds, in all and
// per peer (a uid on a unix socket, counted as the user who owns its
// subordinate range; over TCP the token a connection's requests carry,
// Authenticate), and keeps an accept loop alive when the process is out
// of descriptors: a flood of idle connections then costs each peer its
// own share, never the service's socket. A connection that waits between
// requests (Idle) is closed to make room for a new one rather than the
// new one refused: a client's keep-alive connections never lock it out.
// A TCP connection is nobody's until a request of it proved whose it is:
// until then it is counted by its address, at most PerPeer of them, the
// oldest closed to make room for a new one (of that address, or at the
// total of anyone's): connections without a token never lock out one
// that has it, from any address, and aliases of an address (127.0.0.x)
// do not multiply what a token may hold.
package connlimit

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/service/caller"
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
	// anonymous are the TCP connections no request has proved whose
	// they are yet, oldest first; their peers' counts are by address.
	anonymous []*Conn

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
		_, anonymous := c.(*net.TCPConn)
		conn := &Conn{Conn: c, Cred: cred, l: l, key: key, anonymous: anonymous}
		if !l.take(conn) {
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

// take counts a new connection in, closing one to make room: an idle one
// (its peer's own when the peer is at its limit, any when the listener
// is at its), else an anonymous one (the oldest of its address's when
// the new one is anonymous, the oldest of all at the total); false when
// there is none to close.
func (l *Listener) take(nc *Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.makeRoomLocked(nc.key, nc.anonymous, true) {
		return false
	}
	l.total++
	l.peers[nc.key]++
	if nc.anonymous {
		l.anonymous = append(l.anonymous, nc)
	}
	return true
}

// makeRoomLocked closes connections until key may hold one more (and,
// with total, the listener too), as take says (l.mu held).
func (l *Listener) makeRoomLocked(key string, anonymous, total bool) bool {
	for total && l.total >= l.lim.Total || l.peers[key] >= l.lim.PerPeer {
		own := l.peers[key] >= l.lim.PerPeer
		var victim *Conn
		for c := range l.idle {
			if !own || c.key == key {
				victim = c
				break
			}
		}
		if victim == nil && (anonymous || !own) {
			for _, c := range l.anonymous {
				if !own || c.key == key {
					victim = c
					break
				}
			}
		}
		if victim == nil {
			return false
		}
		l.dropLocked(victim)
		// Closed outside the count: its Close gives nothing back twice.
		go victim.Conn.Close()
	}
	return true
}

// Authenticate counts c as key's from now on (over TCP, the token its
// request carried; a unix socket's connections are their uid's from the
// start, and stay so): it leaves its address's count for key's, closing
// an idle connection of key's when key is at its limit. False when key
// holds its limit of busy connections: the caller refuses the request
// and closes c.
func (c *Conn) Authenticate(key string) bool {
	l := c.l
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.gone || !c.anonymous {
		return true
	}
	if !l.makeRoomLocked(key, false, false) {
		return false
	}
	l.forgetAnonymousLocked(c)
	if l.peers[c.key]--; l.peers[c.key] <= 0 {
		delete(l.peers, c.key)
	}
	c.key, c.anonymous = key, false
	l.peers[key]++
	return true
}

// forgetAnonymousLocked takes c off the anonymous connections (l.mu held).
func (l *Listener) forgetAnonymousLocked(c *Conn) {
	for i, a := range l.anonymous {
		if a == c {
			l.anonymous = append(l.anonymous[:i], l.anonymous[i+1:]...)
			return
		}
	}
}

// dropLocked takes c out of the count (l.mu held), once.
func (l *Listener) dropLocked(c *Conn) {
	if c.gone {
		return
	}
	c.gone = true
	delete(l.idle, c)
	if c.anonymous {
		l.forgetAnonymousLocked(c)
	}
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
	// anonymous: a TCP connection no request has proved whose it is
	// yet, counted by its address (l.mu).
	anonymous bool
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

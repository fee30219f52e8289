// Package connlimit bounds the connections a service holds, in all and
// per peer (a uid on a unix socket, an address over TCP), and keeps an
// accept loop alive when the process is out of descriptors: a flood of
// idle connections then costs each peer its own share, never the
// service's socket.
package connlimit

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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

	// Refused counts connections closed for being beyond a limit;
	// Starved counts accepts that failed for want of descriptors.
	Refused, Starved atomic.Int64
}

// New limits l's connections.
func New(l net.Listener, lim Limits) *Listener {
	return &Listener{Listener: l, lim: lim.withDefaults(), peers: map[string]int{}}
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
		if !l.take(key) {
			l.Refused.Add(1)
			c.Close()
			continue
		}
		return &Conn{Conn: c, Cred: cred, release: func() { l.give(key) }}, nil
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

func (l *Listener) take(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.lim.Total || l.peers[key] >= l.lim.PerPeer {
		return false
	}
	l.total++
	l.peers[key]++
	return true
}

func (l *Listener) give(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.peers[key]--; l.peers[key] <= 0 {
		delete(l.peers, key)
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
		uid := -1
		if cred != nil {
			uid = int(cred.Uid)
		}
		return "uid " + strconv.Itoa(uid), cred
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
	Cred    *unix.Ucred
	once    sync.Once
	release func()
}

// NetConn is the connection as accepted (a *net.UnixConn or
// *net.TCPConn), for what needs its type (peer credentials, descriptors).
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Close closes the connection and gives its place back.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

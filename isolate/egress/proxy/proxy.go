// Package proxy is a box's egress proxy: HTTP CONNECT, plain HTTP and
// SOCKS5 on one listener (the box's loopback), each destination checked
// against an egress.Policy and connected from the host's network.
package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/isolate-sandbox/isolate/isolate/egress"
)

// Bounds of one box's proxy.
const (
	MaxConns       = 64        // connections open at once; more are refused
	MaxBytes       = 256 << 20 // bytes through the proxy, both ways, per box
	headerTimeout  = 10 * time.Second
	idleTimeout    = 5 * time.Minute
	dialTimeout    = 10 * time.Second
	maxHeaderBytes = 64 << 10
)

// Proxy serves one box: HTTP CONNECT, plain HTTP and SOCKS5 on one
// listener, each destination checked against the policy.
type Proxy struct {
	policy  *egress.Policy
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	dial    func(ctx context.Context, addr string) (net.Conn, error)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	slots  chan struct{}

	mu     sync.Mutex
	l      net.Listener
	conns  map[net.Conn]struct{}
	report egress.Report
	bytes  int64
}

// New is a proxy of policy; resolve and dial default to the host's
// resolver and a TCP dial from the host's network.
func New(policy *egress.Policy, resolve func(ctx context.Context, host string) ([]netip.Addr, error), dial func(ctx context.Context, addr string) (net.Conn, error)) *Proxy {
	if resolve == nil {
		resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if dial == nil {
		d := &net.Dialer{Timeout: dialTimeout}
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	p := &Proxy{policy: policy, resolve: resolve, dial: dial, slots: make(chan struct{}, MaxConns), conns: map[net.Conn]struct{}{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// Serve answers the box's connections on l until Close.
func (p *Proxy) Serve(l net.Listener) {
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case p.slots <- struct{}{}:
			default:
				c.Close() // beyond MaxConns
				p.record(egress.Connection{Via: "?", Reason: fmt.Sprintf("more than %d connections at once", MaxConns)})
				continue
			}
			p.track(c, true)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer func() { <-p.slots }()
				defer p.track(c, false)
				defer c.Close()
				p.serve(c)
			}()
		}
	}()
}

// Close stops the proxy: the listener, every connection through it; it
// returns what the proxy saw.
func (p *Proxy) Close() *egress.Report {
	p.cancel()
	p.mu.Lock()
	if p.l != nil {
		p.l.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.report
	if r.Connections == nil {
		r.Connections = []egress.Connection{}
	}
	return &r
}

func (p *Proxy) track(c net.Conn, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if open {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

// record lists a connection once it ended (or was refused).
func (p *Proxy) record(c egress.Connection) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.Allowed {
		p.report.Allowed++
	} else {
		p.report.Refused++
	}
	if len(p.report.Connections) < egress.MaxLogged {
		p.report.Connections = append(p.report.Connections, c)
	} else {
		p.report.Unlisted++
	}
}

// serve answers one connection from the box: SOCKS5 when its first byte
// says so, else HTTP.
func (p *Proxy) serve(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(headerTimeout))
	// The request's head is bounded in time and in bytes; what follows
	// it (a tunnel's bytes, a request's body) only by the box's budget.
	head := &headLimit{r: c, left: maxHeaderBytes}
	br := bufio.NewReaderSize(head, 4096)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == 5 {
		p.socks(c, br, head)
		return
	}
	p.http(c, br, head)
}

// headLimit reads at most left bytes, until the head is read (left < 0).
type headLimit struct {
	r    io.Reader
	left int
}

func (h *headLimit) Read(b []byte) (int, error) {
	if h.left < 0 {
		return h.r.Read(b)
	}
	if h.left == 0 {
		return 0, errors.New("the request's head is too long")
	}
	if len(b) > h.left {
		b = b[:h.left]
	}
	n, err := h.r.Read(b)
	h.left -= n
	return n, err
}

func (h *headLimit) done() { h.left = -1 }

// open checks host:port against the policy, resolves it and connects:
// the connection, and the record so far.
func (p *Proxy) open(host string, port uint16, via string) (net.Conn, *egress.Connection) {
	rec := &egress.Connection{Host: host, Port: port, Via: via}
	if err := p.policy.CheckName(host, port); err != nil {
		rec.Reason = err.Error()
		return nil, rec
	}
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	defer cancel()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a.Unmap()}
	} else {
		found, err := p.resolve(ctx, host)
		if err != nil {
			rec.Reason = "resolve: " + err.Error()
			return nil, rec
		}
		for _, a := range found {
			if err := p.policy.CheckResolved(a, port); err != nil {
				rec.Reason = host + " resolved to " + err.Error()
				continue
			}
			addrs = append(addrs, a.Unmap())
		}
		if len(addrs) == 0 {
			if rec.Reason == "" {
				rec.Reason = "resolve: no address"
			}
			return nil, rec
		}
	}
	var last error
	for _, a := range addrs {
		addr := net.JoinHostPort(a.String(), strconv.Itoa(int(port)))
		conn, err := p.dial(ctx, addr)
		if err == nil {
			rec.Address, rec.Allowed, rec.Reason = addr, true, ""
			return conn, rec
		}
		last = err
	}
	rec.Reason = "connect: " + last.Error()
	return nil, rec
}

// http answers CONNECT (a tunnel) or one plain request for an absolute
// URL (then the connection ends: each request is checked on its own).
// It reads the request's head itself (net/textproto): the one-shot
// isolate binary, which serves this proxy, links no net/http.
func (p *Proxy) http(c net.Conn, br *bufio.Reader, head *headLimit) {
	req, err := readRequest(br)
	head.done()
	if err != nil {
		writeStatus(c, statusBadRequest, "isolate's egress proxy: a bad request: "+err.Error())
		return
	}
	if req.method == "CONNECT" {
		host, port, err := hostPort(req.target, 443)
		if err != nil {
			writeStatus(c, statusBadRequest, "isolate's egress proxy: "+err.Error())
			p.record(egress.Connection{Host: req.target, Via: "connect", Reason: err.Error()})
			return
		}
		up, rec := p.open(host, port, "connect")
		if up == nil {
			writeStatus(c, statusForbidden, "isolate's egress proxy refused "+req.target+": "+rec.Reason)
			p.record(*rec)
			return
		}
		io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
		p.splice(c, br, up, rec)
		return
	}
	u, err := url.Parse(req.target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		writeStatus(c, statusBadRequest, "isolate's egress proxy: only http:// URLs and CONNECT are served")
		return
	}
	host, port, err := hostPort(u.Host, 80)
	if err != nil {
		writeStatus(c, statusBadRequest, "isolate's egress proxy: "+err.Error())
		return
	}
	up, rec := p.open(host, port, "http")
	if up == nil {
		writeStatus(c, statusForbidden, "isolate's egress proxy refused "+u.Host+": "+rec.Reason)
		p.record(*rec)
		return
	}
	// One request per connection, in origin form: the next one might
	// name another host.
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\r\n", req.method, u.RequestURI(), req.proto)
	if req.header.Get("Host") == "" {
		fmt.Fprintf(&b, "Host: %s\r\n", u.Host)
	}
	for k, vs := range req.header {
		switch k {
		case "Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive":
			continue
		}
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("Connection: close\r\n\r\n")
	c.SetReadDeadline(time.Time{})
	n, err := io.WriteString(up, b.String())
	if err != nil {
		up.Close()
		rec.Allowed, rec.Reason = false, "send: "+err.Error()
		p.record(*rec)
		return
	}
	rec.BytesOut = int64(n)
	p.splice(c, br, up, rec)
}

// request is the head of an HTTP/1.x request: its line and its header.
type request struct {
	method, target, proto string
	header                textproto.MIMEHeader
}

func readRequest(br *bufio.Reader) (*request, error) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return nil, err
	}
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "" || target == "" || !strings.HasPrefix(proto, "HTTP/1.") {
		return nil, fmt.Errorf("malformed request line %q", line)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	return &request{method: method, target: target, proto: proto, header: h}, nil
}

// The statuses the proxy answers with itself.
const (
	statusBadRequest = 400
	statusForbidden  = 403
)

// socks answers one SOCKS5 CONNECT (no authentication; a name or an
// address as the destination).
func (p *Proxy) socks(c net.Conn, br *bufio.Reader, head *headLimit) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	if !strings.ContainsRune(string(methods), 0) {
		c.Write([]byte{5, 0xff}) // no acceptable method
		return
	}
	c.Write([]byte{5, 0})
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil {
		return
	}
	if req[0] != 5 || req[1] != 1 { // CONNECT only
		c.Write([]byte{5, 7, 0, 1, 0, 0, 0, 0, 0, 0})
		p.record(egress.Connection{Via: "socks5", Reason: "only CONNECT is served (no UDP, no BIND)"})
		return
	}
	var host string
	switch req[3] {
	case 1, 4:
		b := make([]byte, 4)
		if req[3] == 4 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		a, _ := netip.AddrFromSlice(b)
		host = a.Unmap().String()
	case 3:
		n, err := br.ReadByte()
		if err != nil {
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = string(b)
	default:
		c.Write([]byte{5, 8, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return
	}
	port := binary.BigEndian.Uint16(pb[:])
	head.done()
	up, rec := p.open(host, port, "socks5")
	if up == nil {
		c.Write([]byte{5, 2, 0, 1, 0, 0, 0, 0, 0, 0}) // not allowed by ruleset
		p.record(*rec)
		return
	}
	c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	p.splice(c, br, up, rec)
}

// splice copies both ways until either side ends, within the box's byte
// budget and the idle timeout, then records the connection.
func (p *Proxy) splice(c net.Conn, br *bufio.Reader, up net.Conn, rec *egress.Connection) {
	defer up.Close()
	p.track(up, true)
	defer p.track(up, false)
	c.SetReadDeadline(time.Time{})
	var wg sync.WaitGroup
	var out, in int64
	wg.Add(2)
	go func() {
		defer wg.Done()
		out = p.copy(up, br, c)
		closeWrite(up)
	}()
	go func() {
		defer wg.Done()
		in = p.copy(c, up, up)
		closeWrite(c)
	}()
	wg.Wait()
	rec.BytesOut += out
	rec.BytesIn += in
	p.record(*rec)
}

// copy copies src to dst (src's connection is from, for its deadline),
// counting against the box's budget; it stops at the budget or after
// idleTimeout without a byte.
func (p *Proxy) copy(dst io.Writer, src io.Reader, from net.Conn) int64 {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		from.SetReadDeadline(time.Now().Add(idleTimeout))
		k, err := src.Read(buf)
		if k > 0 {
			p.mu.Lock()
			over := p.bytes+int64(k) > MaxBytes
			if !over {
				p.bytes += int64(k)
			}
			p.mu.Unlock()
			if over {
				return n
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n
			}
			n += int64(k)
		}
		if err != nil {
			return n
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}

// hostPort splits HOST[:PORT] (def when absent).
func hostPort(hp string, def uint16) (string, uint16, error) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return strings.Trim(hp, "[]"), def, nil
		}
		return "", 0, err
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("port %q: expected 1 to 65535", port)
	}
	return host, uint16(n), nil
}

func writeStatus(c net.Conn, code int, msg string) {
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, map[int]string{statusBadRequest: "Bad Request", statusForbidden: "Forbidden"}[code], len(msg)+1, msg+"\n")
}

// counter counts what passes to w.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

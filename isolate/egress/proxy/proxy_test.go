package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate/egress"
)

// testProxy is a proxy on loopback whose resolver maps names from a
// table, and whose dial sends documentation addresses to test servers.
type testProxy struct {
	*Proxy
	addr string
}

func newTestProxy(t *testing.T, allow []string, names map[string]string, routes map[string]string) *testProxy {
	t.Helper()
	pol, err := egress.Parse("network", allow, nil)
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		a, ok := names[host]
		if !ok {
			return nil, fmt.Errorf("no such host %s", host)
		}
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		if to, ok := routes[addr]; ok {
			addr = to
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := New(pol, resolve, dial)
	p.Serve(l)
	return &testProxy{Proxy: p, addr: l.Addr().String()}
}

func TestProxy(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "plain %s %s %d", r.Method, r.URL.Path, len(b))
	}))
	defer plain.Close()
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "secure %s", r.URL.Path)
	}))
	defer secure.Close()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	go func() {
		for {
			c, err := raw.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "echo %s", line)
			}()
		}
	}()
	p := newTestProxy(t,
		[]string{"pkgs.test", "secure.test:443", "db.test:5432", "rebind.test"},
		map[string]string{"pkgs.test": "203.0.113.10", "secure.test": "203.0.113.11", "db.test": "203.0.113.12", "rebind.test": "127.0.0.1", "other.test": "203.0.113.13"},
		map[string]string{"203.0.113.10:80": strings.TrimPrefix(plain.URL, "http://"), "203.0.113.11:443": strings.TrimPrefix(secure.URL, "https://"),
			"203.0.113.12:5432": raw.Addr().String()})
	proxyURL, _ := url.Parse("http://" + p.addr)
	pool := secure.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"}}}
	get := func(u string) (int, string) {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://pkgs.test/simple/"); code != 200 || body != "plain GET /simple/ 0" {
		t.Errorf("plain HTTP: %d %q", code, body)
	}
	resp, err := client.Post("http://pkgs.test/upload", "text/plain", strings.NewReader(strings.Repeat("x", 200000)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "plain POST /upload 200000" {
		t.Errorf("a body beyond the head's bound: %q", b)
	}
	if code, body := get("https://secure.test/x"); code != 200 || body != "secure /x" {
		t.Errorf("HTTPS through CONNECT: %d %q", code, body)
	}
	if _, err := client.Get("https://other.test/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("a name not allowed: %v", err)
	}
	if code, _ := get("http://other.test/"); code != http.StatusForbidden {
		t.Errorf("plain HTTP to a name not allowed: %d", code)
	}
	if code, body := get("http://rebind.test/"); code != http.StatusForbidden || !strings.Contains(body, "127.0.0.1") {
		t.Errorf("a name that resolves to loopback: %d %q", code, body)
	}
	if code, _ := get("http://203.0.113.10/"); code != http.StatusForbidden {
		t.Errorf("an address the client named, without a rule: %d", code)
	}
	// SOCKS5 with a name, to a raw TCP service.
	if got, err := socks5(p.addr, "db.test", 5432, "hello\n"); err != nil || got != "echo hello\n" {
		t.Errorf("SOCKS5: %q %v", got, err)
	}
	if _, err := socks5(p.addr, "db.test", 5433, "x\n"); err == nil {
		t.Error("SOCKS5 to a port not allowed went through")
	}
	rep := p.Close()
	if rep.Allowed != 4 || rep.Refused != 5 || len(rep.Connections) != 9 {
		t.Errorf("report: %d allowed, %d refused, %d listed: %+v", rep.Allowed, rep.Refused, len(rep.Connections), rep.Connections)
	}
	for _, c := range rep.Connections {
		if c.Allowed && (c.BytesIn == 0 || c.BytesOut == 0 || c.Address == "") {
			t.Errorf("an allowed connection without its bytes or address: %+v", c)
		}
		if !c.Allowed && c.Reason == "" {
			t.Errorf("a refusal without a reason: %+v", c)
		}
	}
}

// socks5 connects through the proxy at addr to host:port and sends msg;
// the first line of the answer.
func socks5(addr, host string, port uint16, msg string) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.Write([]byte{5, 1, 0})
	var sel [2]byte
	if _, err := io.ReadFull(c, sel[:]); err != nil || sel[1] != 0 {
		return "", fmt.Errorf("method: %v %v", sel, err)
	}
	req := append([]byte{5, 1, 0, 3, byte(len(host))}, host...)
	req = binary.BigEndian.AppendUint16(req, port)
	c.Write(req)
	var rep [10]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		return "", err
	}
	if rep[1] != 0 {
		return "", fmt.Errorf("refused: reply %d", rep[1])
	}
	io.WriteString(c, msg)
	return bufio.NewReader(c).ReadString('\n')
}

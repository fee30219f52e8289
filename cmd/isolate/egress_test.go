package main

// Network by policy, end to end: servers on the host's loopback (HTTP,
// HTTPS with a real TLS handshake, a raw TCP service), names mapped by a
// hosts file of the test's (in a mount namespace of the isolate command
// alone), and curl and python3 in the box. With ISOLATE_TEST_VIA=service
// the same runs are handed to the service, whose proxy resolves with the
// service's own resolver: the tests by name run in-process only.

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// egressServers are the test's servers on the host's loopback.
type egressServers struct {
	plain, secure *httptest.Server
	raw           net.Listener
	ca            string // the TLS server's certificate, PEM, in a directory the box user reads
	dir           string
}

func startEgressServers(t *testing.T) *egressServers {
	t.Helper()
	s := &egressServers{dir: shareDir(t)}
	s.plain = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "plain %s", r.URL.Path)
	}))
	t.Cleanup(s.plain.Close)
	s.secure = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "secure %s", r.URL.Path)
	}))
	t.Cleanup(s.secure.Close)
	s.ca = filepath.Join(s.dir, "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.secure.Certificate().Raw})
	if err := os.WriteFile(s.ca, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.raw, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.raw.Close() })
	go func() {
		for {
			c, err := s.raw.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "raw %s", line)
			}()
		}
	}()
	return s
}

func port(u string) string { return u[strings.LastIndexByte(u, ':')+1:] }

func TestNetworkAllowlist(t *testing.T) {
	needRoot(t)
	s := startEgressServers(t)
	plain, secure, raw := port(s.plain.URL), port(s.secure.URL), port(s.raw.Addr().String())
	allow := "--net=allow:127.0.0.1:" + plain + ",127.0.0.1:" + secure + ",127.0.0.1:" + raw
	script := strings.Join([]string{
		"curl -s http://127.0.0.1:" + plain + "/a; echo",
		"curl -s --cacert /box/ca.pem https://127.0.0.1:" + secure + "/b; echo",
		// SOCKS5, to a raw TCP service (curl's telnet speaks plain TCP).
		"echo hello | curl -s --max-time 5 --proxy socks5h://127.0.0.1:3128 telnet://127.0.0.1:" + raw,
		"curl -s -o /dev/null -w 'refused %{http_code}\\n' http://127.0.0.2:" + plain + "/",
		"curl -s --noproxy '*' --max-time 2 http://127.0.0.1:" + plain + "/ || echo 'direct: unreachable'",
		"python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"x\", (\"192.0.2.1\", 53))' 2>/dev/null || echo 'udp: unreachable'",
	}, "\n")
	rep, code := runBox(t, allow, "--copy-in", s.ca+":/box/ca.pem", "--", "/bin/sh", "-c", script)
	expectStatus(t, rep, "OK")
	want := "plain /a\nsecure /b\nraw hello\nrefused 403\ndirect: unreachable\nudp: unreachable\n"
	if rep.Stdout != want || code != 0 {
		t.Errorf("stdout %q, want %q (stderr %q)", rep.Stdout, want, rep.Stderr)
	}
	n := rep.Network
	if n == nil || n.Allowed != 3 || n.Refused != 1 {
		t.Fatalf("the report's network: %+v", n)
	}
	for _, c := range n.Connections {
		switch {
		case c.Allowed && (c.BytesIn == 0 || c.BytesOut == 0):
			t.Errorf("an allowed connection without its bytes: %+v", c)
		case !c.Allowed && (c.Host != "127.0.0.2" || !strings.Contains(c.Reason, "127.0.0.2")):
			t.Errorf("the refusal: %+v", c)
		}
	}
	// Without an allowlist nothing changes: loopback only, no proxy.
	rep, _ = runBox(t, "--", "/bin/sh", "-c", "curl -s --max-time 2 http://127.0.0.1:"+plain+"/ || echo unreachable; env | grep -ci proxy")
	if rep.Stdout != "unreachable\n0\n" || rep.Network != nil {
		t.Errorf("net none: %q, network %+v", rep.Stdout, rep.Network)
	}
}

// Names: the client's name is what the policy checks, and where it
// resolves is checked again, so that an allowed name cannot lead to the
// host's loopback unless an address rule allows that too.
func TestNetworkAllowlistNames(t *testing.T) {
	needRoot(t)
	if viaService {
		t.Skip("the service's proxy resolves names with the service's own resolver, not the test's hosts file")
	}
	s := startEgressServers(t)
	plain := port(s.plain.URL)
	hosts := filepath.Join(s.dir, "hosts")
	os.WriteFile(hosts, []byte("127.0.0.1 localhost\n127.0.0.1 pkgs.test\n127.0.0.1 rebind.test\n"), 0o644)
	run := func(net, url string) (*reportWithNetwork, string) {
		cmd := exec.Command("unshare", "-m", "/bin/sh", "-c", `mount --bind "$0" /etc/hosts && exec "$@"`, hosts,
			isolateBin, "run", "--json", net, "--", "curl", "-s", "-w", " %{http_code}", url)
		res := runResult(t, cmd)
		rep := decodeReport(t, res)
		return rep, rep.Stdout
	}
	if rep, out := run("--net=allow:pkgs.test:"+plain+",127.0.0.1", "http://pkgs.test:"+plain+"/x"); out != "plain /x 200" {
		t.Errorf("an allowed name and its address: %q %+v", out, rep.Network)
	}
	rep, out := run("--net=allow:rebind.test", "http://rebind.test:"+plain+"/")
	if !strings.HasSuffix(out, " 403") || rep.Network == nil || len(rep.Network.Connections) != 1 ||
		!strings.Contains(rep.Network.Connections[0].Reason, "127.0.0.1 is a loopback") {
		t.Errorf("a name that resolves to the host's loopback: %q %+v", out, rep.Network)
	}
	if _, out := run("--net=allow:*.pkgs.test,127.0.0.1", "http://pkgs.test:"+plain+"/"); !strings.HasSuffix(out, " 403") {
		t.Errorf("*.pkgs.test allowed pkgs.test itself: %q", out)
	}
}

type reportWithNetwork = struct {
	Status  string `json:"status"`
	Stdout  string `json:"stdout"`
	Network *struct {
		Connections []struct {
			Host    string `json:"host"`
			Allowed bool   `json:"allowed"`
			Reason  string `json:"reason"`
		} `json:"connections"`
	} `json:"network"`
}

func decodeReport(t *testing.T, res result) *reportWithNetwork {
	t.Helper()
	var rep reportWithNetwork
	if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
		t.Fatalf("no report: %v\nstdout %s\nstderr %s", err, res.Stdout, res.Stderr)
	}
	return &rep
}

func TestNetworkAllowlistBadInput(t *testing.T) {
	needRoot(t)
	for _, net := range []string{"--net=allow:", "--net=allow:a..b", "--net=allow:10.0.0.0/40", "--net=allow:x.org:0", "--net=bridge"} {
		res := isolateCmd(t, "", "run", net, "--", "/bin/true")
		if res.Code != 2 || !strings.Contains(res.Stderr, "--net") {
			t.Errorf("%s: exit %d, stderr %q; want 2 and a line naming --net", net, res.Code, res.Stderr)
		}
	}
}

// Without root the allowlist works the same: PID 1 of the box listens,
// and the user's own supervisor serves its listener.
func TestNetworkAllowlistWithoutRoot(t *testing.T) {
	needRoot(t)
	s := startEgressServers(t)
	plain := port(s.plain.URL)
	env, tmp := rootlessEnv(t)
	rep, _ := rootlessRun(t, env, "--net=allow:127.0.0.1:"+plain, "--", "/bin/sh", "-c",
		"curl -s http://127.0.0.1:"+plain+"/nobody; echo; curl -s --noproxy '*' --max-time 2 http://127.0.0.1:"+plain+"/ || echo unreachable")
	expectStatus(t, rep, "OK")
	if rep.Stdout != "plain /nobody\nunreachable\n" || rep.Network == nil || rep.Network.Allowed != 1 {
		t.Errorf("stdout %q, network %+v", rep.Stdout, rep.Network)
	}
	if leaks := rootlessLeaks(tmp, ""); len(leaks) > 0 {
		t.Errorf("left behind: %v", leaks)
	}
}

// A package index on the host's loopback, as a company mirror would be:
// pip in the box (the host's python3 and pip, bound read-only) downloads
// a wheel from it through the proxy, and nothing else.
func TestNetworkAllowlistPipIndex(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat("/usr/lib/python3/dist-packages/pip"); err != nil {
		t.Fatalf("Debian's python3-pip is needed (scripts/test.sh installs it): %v", err)
	}
	wheel := demoWheel(t)
	index := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/simple/demo/":
			fmt.Fprint(w, `<!DOCTYPE html><html><body><a href="/files/demo-1.0-py3-none-any.whl">demo-1.0-py3-none-any.whl</a></body></html>`)
		case "/files/demo-1.0-py3-none-any.whl":
			w.Write(wheel)
		default:
			http.NotFound(w, r)
		}
	}))
	defer index.Close()
	rep, _ := runBox(t, "--net=allow:127.0.0.1:"+port(index.URL), "--", "/bin/sh", "-c",
		"python3 -m pip download --disable-pip-version-check --no-cache-dir -q --no-deps -d /tmp/d --index-url "+index.URL+"/simple/ demo && ls /tmp/d")
	expectStatus(t, rep, "OK")
	if rep.Stdout != "demo-1.0-py3-none-any.whl\n" || rep.Network == nil || rep.Network.Refused != 0 {
		t.Errorf("stdout %q, stderr %q, network %+v", rep.Stdout, rep.Stderr, rep.Network)
	}
}

// demoWheel is a wheel of an empty package, demo 1.0.
func demoWheel(t *testing.T) []byte {
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	for name, body := range map[string]string{
		"demo/__init__.py":                 "",
		"demo-1.0.dist-info/METADATA":      "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
		"demo-1.0.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: isolate-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"demo-1.0.dist-info/RECORD":        "",
		"demo-1.0.dist-info/top_level.txt": "demo\n",
	} {
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, body)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

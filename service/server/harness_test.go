package server

// The service's tests start real services on temporary unix sockets (or
// 127.0.0.1) over a real isolate.Host, as root against the real kernel,
// and stop them. Tests that only decode requests need no root.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
	"github.com/isolate-sandbox/isolate/service/filestore"
)

func TestMain(m *testing.M) {
	boxinit.MaybeInit()
	if os.Geteuid() == 0 {
		// What services of other test binaries left when they were
		// killed is not this suite's: sweep it as a starting service does.
		if err := SweepWork(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if code == 0 && os.Geteuid() == 0 {
		if err := leftovers(); err != nil {
			fmt.Fprintln(os.Stderr, "leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leftovers finds what a test left: a child process of ours, a work
// directory.
func leftovers() error {
	me := strconv.Itoa(os.Getpid())
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 1 && f[1] == me {
				return fmt.Errorf("process %s is still our child", p)
			}
		}
	}
	if processWork.dir != "" {
		if ents, err := os.ReadDir(processWork.dir); err == nil && len(ents) > 0 {
			return fmt.Errorf("%d work directories left in %s", len(ents), processWork.dir)
		}
	}
	if ents, err := os.ReadDir(workRoot); err == nil {
		for _, e := range ents {
			if d := filepath.Join(workRoot, e.Name()); d != processWork.dir && !locked(d) {
				return fmt.Errorf("%s is left by a service that is gone", d)
			}
		}
	}
	return nil
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts sandboxes")
	}
}

// hostRunner runs commands on a real host.
type hostRunner struct{ h *isolate.Host }

func (r hostRunner) Run(ctx context.Context, spec *api.Spec, stdio isolate.IO) (*api.Report, error) {
	return r.h.Run(ctx, spec, stdio)
}
func (r hostRunner) Ready() int { return r.h.PoolReady() }

// service is a running test service and a client of it.
type service struct {
	*Server
	sock   string
	store  *filestore.Store
	client *http.Client
	done   chan error
}

// startService starts a service on a temporary unix socket; adjust
// changes the configuration first. It stops when the test ends.
func startService(t *testing.T, adjust func(*Config)) *service {
	t.Helper()
	needRoot(t)
	// Not t.TempDir: its parent is private, and the not-root test client
	// must reach the socket.
	dir, err := os.MkdirTemp("", "isolate-serve-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	store, err := filestore.Open(filepath.Join(dir, "files"), 1<<20, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	host, err := isolate.NewHost(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Runner: hostRunner{host}, Exec: Judge{Host: host}, Store: store, Version: "test", Parallel: 4, Queue: 16,
		Health: func() Health { return Health{Ready: true} }, Sessions: HostSessions{Host: host}}
	if adjust != nil {
		adjust(&cfg)
	}
	// As isolate-serve does: boxes built ahead.
	if err := host.StartPool(isolate.PoolConfig{Max: 2 * cfg.Parallel}); err != nil {
		t.Fatal(err)
	}
	s := &service{Server: New(cfg), sock: filepath.Join(dir, "api.sock"), store: store, done: make(chan error, 1)}
	l, err := ListenUnix(s.sock, 65534) // nogroup: the not-root client's group
	if err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.Serve(l) }()
	s.client = unixClient(s.sock)
	t.Cleanup(func() {
		s.Shutdown(5 * time.Second)
		if err := <-s.done; err != nil {
			t.Error(err)
		}
		host.StopPool()
		store.Close()
	})
	return s
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// do sends a request and returns the status and body.
func (s *service) do(t *testing.T, method, path, body string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://isolate"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// run posts a run request and decodes a 200 answer.
func (s *service) run(t *testing.T, body string) *RunResponse {
	t.Helper()
	code, b := s.do(t, "POST", "/v1/run", body)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/run: %d %s", code, b)
	}
	var resp RunResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return &resp
}

func (s *service) running() int {
	r, _ := s.queue.lengths()
	return r
}

// processWith tells whether a process whose command line holds marker
// exists.
func processWith(marker string) bool {
	cmds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmds {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(marker)) {
			return true
		}
	}
	return false
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

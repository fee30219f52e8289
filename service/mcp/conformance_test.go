package mcp_test

// The MCP server against the clients of the protocol's own project: its
// conformance suite against /mcp (streamable HTTP), and the Inspector's
// command line against `isolate mcp` (stdio). Both come from the npm
// registry (scripts/mcp-clients.sh, which scripts/test.sh runs and names
// in ISOLATE_MCP_CLIENTS).

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// conformanceScenarios are the suite's server scenarios that apply to a
// server of tools: the others test tools, resources or prompts of the
// suite's own reference server, by name.
var conformanceScenarios = []string{"server-initialize", "ping", "tools-list", "logging-set-level",
	"server-sse-multiple-streams", "resources-list", "prompts-list"}

func mcpClients(t *testing.T) string {
	dir := os.Getenv("ISOLATE_MCP_CLIENTS")
	if dir == "" {
		t.Skip("ISOLATE_MCP_CLIENTS is not set: scripts/mcp-clients.sh installs the MCP clients (scripts/test.sh does)")
	}
	return dir
}

func TestConformanceSuite(t *testing.T) {
	dir := mcpClients(t)
	s := startService(t)
	// The suite speaks HTTP over TCP: a proxy on loopback, for this test
	// alone, to the service's unix socket.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: "isolate"})
	proxy.Transport = s.apiClient().Transport
	proxy.FlushInterval = -1 // server-sent events pass at once
	hs := &http.Server{Handler: proxy}
	go hs.Serve(l)
	defer hs.Close()
	for _, sc := range conformanceScenarios {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "node", filepath.Join(dir, "node_modules/@modelcontextprotocol/conformance/dist/index.js"),
			"server", "--url", "http://"+l.Addr().String()+"/mcp", "--scenario", sc)
		cmd.Dir = t.TempDir() // it writes its results where it runs
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), " 0 failed") {
			t.Errorf("scenario %s: %v\n%s", sc, err, out)
		}
	}
}

func TestInspectorCLI(t *testing.T) {
	dir := mcpClients(t)
	s := startService(t)
	inspect := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", append([]string{"index.js", bin, "mcp", "--socket", s.socket}, args...)...)
		// It reads its own package.json relative to where it runs.
		cmd.Dir = filepath.Join(dir, "node_modules/@modelcontextprotocol/inspector-cli/build")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("inspector %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := inspect("--method", "tools/list"); !strings.Contains(out, `"run_code"`) || !strings.Contains(out, `"session_run_code"`) {
		t.Errorf("tools/list:\n%s", out)
	}
	out := inspect("--method", "tools/call", "--tool-name", "run_command", "--tool-arg", "command=echo from the inspector")
	if !strings.Contains(out, `"stdout": "from the inspector\n"`) || !strings.Contains(out, `"status": "OK"`) || strings.Contains(out, `"isError": true`) {
		t.Errorf("tools/call run_command:\n%s", out)
	}
	out = inspect("--method", "tools/call", "--tool-name", "run_code", "--tool-arg", "language=python", "--tool-arg", "code=raise ValueError('bad')")
	if !strings.Contains(out, `"name": "ValueError"`) || !strings.Contains(out, `"isError": true`) {
		t.Errorf("tools/call run_code raising:\n%s", out)
	}
}

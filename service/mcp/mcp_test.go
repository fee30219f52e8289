package mcp_test

// The MCP front end as clients use it: the real isolate binary's `isolate
// mcp` over stdio (started by an MCP client, the Go SDK's), and the
// service's /mcp over streamable HTTP on its unix socket, against a real
// service, as root against the real kernel. A user who is not root
// (nobody) drives `isolate mcp` too, and gets a caller's caps.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/isolate-sandbox/isolate/internal/testbin"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

var bin, serveBin string

func TestMain(m *testing.M) {
	boxinit.MaybeInit()
	if os.Geteuid() != 0 {
		os.Exit(m.Run()) // the end-to-end tests skip; the unit tests run
	}
	code := func() int {
		bin = os.Getenv("ISOLATE_BIN")
		if bin == "" {
			dir, err := os.MkdirTemp("", "isolate-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			os.Chmod(dir, 0o755) // nobody runs it too
			bin = filepath.Join(dir, "isolate")
			for pkg, out := range map[string]string{"../../cmd/isolate": bin, "../../cmd/isolate-serve": filepath.Join(dir, "isolate-serve")} {
				if err := testbin.Build(out, pkg); err != nil {
					fmt.Fprintln(os.Stderr, "build:", err)
					return 1
				}
			}
		}
		serveBin = filepath.Join(filepath.Dir(bin), "isolate-serve")
		return m.Run()
	}()
	os.Exit(code)
}

// service is an isolate-serve of the test's on private sockets.
type service struct {
	dir, socket string
	cmd         *exec.Cmd
}

// startService starts a service whose socket nobody's group (65534) may
// use, with caps for callers who are not root, and stops it at the end.
func startService(t *testing.T) *service {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a real service and real boxes")
	}
	dir, err := os.MkdirTemp("", "isolate-mcp-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	s := &service{dir: dir, socket: filepath.Join(dir, "api.sock")}
	s.cmd = exec.Command(serveBin, "--socket", s.socket, "--socket-group", "65534", "--cli-socket", "none",
		"--store", filepath.Join(dir, "files"), "--pool", "1", "--grace", "5s", "--max-time", "2s")
	s.cmd.Stderr = os.Stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		s.cmd.Wait()
		os.RemoveAll(dir)
	})
	for i := 0; i < 300; i++ {
		if c, err := net.Dial("unix", s.socket); err == nil {
			c.Close()
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the service did not listen")
	return nil
}

// apiClient is an HTTP client of the service's socket.
func (s *service) apiClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", s.socket)
	}}}
}

// sessions lists the service's sessions of root.
func (s *service) sessions(t *testing.T) []string {
	resp, err := s.apiClient().Get("http://isolate/v1/sessions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct {
		Sessions []struct {
			ID string `json:"id"`
		} `json:"sessions"`
	}
	json.NewDecoder(resp.Body).Decode(&ans)
	var ids []string
	for _, s := range ans.Sessions {
		ids = append(ids, s.ID)
	}
	return ids
}

// stdio connects an MCP client to `isolate mcp --socket` run as cred
// (nil: root).
func (s *service) stdio(t *testing.T, cred *syscall.Credential) *sdk.ClientSession {
	cmd := exec.Command(bin, "mcp", "--socket", s.socket)
	cmd.Stderr = os.Stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	return connect(t, &sdk.CommandTransport{Command: cmd})
}

// transports are both ways to connect a client as root: stdio and HTTP.
func (s *service) transports() []struct {
	name string
	cs   func(*testing.T) *sdk.ClientSession
} {
	return []struct {
		name string
		cs   func(*testing.T) *sdk.ClientSession
	}{{"stdio", func(t *testing.T) *sdk.ClientSession { return s.stdio(t, nil) }}, {"http", s.http}}
}

// http connects an MCP client to the service's /mcp.
func (s *service) http(t *testing.T) *sdk.ClientSession {
	return connect(t, &sdk.StreamableClientTransport{Endpoint: "http://isolate/mcp", HTTPClient: s.apiClient(), MaxRetries: -1})
}

func connect(t *testing.T, tr sdk.Transport) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "isolate-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal("connect:", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// result is a tool's result: its structured content decoded, its text,
// and whether it is an error.
type result struct {
	out     map[string]any
	text    string
	isError bool
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: a protocol error: %v", name, err)
	}
	r := result{isError: res.IsError}
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			r.text += tc.Text
		}
	}
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &r.out)
	}
	return r
}

func (r result) str(key string) string { s, _ := r.out[key].(string); return s }

func TestToolsList(t *testing.T) {
	s := startService(t)
	cs := s.stdio(t, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 40 || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("%s: a description a model can use and both schemas are needed", tool.Name)
		}
	}
	want := []string{"close_session", "create_session", "describe_sandbox", "run_code", "run_command",
		"session_list_files", "session_read_file", "session_run_code", "session_run_command", "session_write_file"}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
}

func TestRunTools(t *testing.T) {
	s := startService(t)
	for _, tr := range s.transports() {
		t.Run(tr.name, func(t *testing.T) {
			cs := tr.cs(t)
			r := callTool(t, cs, "run_code", map[string]any{"language": "python", "code": "print(input()[::-1])", "stdin": "abc\n"})
			if r.isError || r.str("status") != "OK" || r.str("stdout") != "cba\n" {
				t.Errorf("python: %+v", r)
			}
			r = callTool(t, cs, "run_code", map[string]any{"language": "python", "code": "def f():\n    raise KeyError('k')\nf()\n"})
			e, _ := r.out["error"].(map[string]any)
			if !r.isError || r.str("status") != "RE" || e["name"] != "KeyError" || !strings.Contains(fmt.Sprint(e["traceback"]), "line 2, in f") {
				t.Errorf("an exception: %+v", r)
			}
			r = callTool(t, cs, "run_code", map[string]any{"language": "c", "code": "int main( { return 0; }"})
			if !r.isError || r.str("status") != "CE" || r.out["compile"] == nil {
				t.Errorf("a compile error: %+v", r)
			}
			r = callTool(t, cs, "run_code", map[string]any{"language": "python", "code": "while True: pass", "time_limit_seconds": 0.2})
			if !r.isError || r.str("status") != "TO" || r.str("limit") != "cpu" {
				t.Errorf("a time limit: %+v", r)
			}
			r = callTool(t, cs, "run_command", map[string]any{
				"command": "cat data.txt; ./hello.sh; echo err >&2; head -c 100000 /dev/zero | tr '\\0' x; exit 4",
				"files": []map[string]any{
					{"path": "data.txt", "content": "data\n"},
					{"path": "/box/hello.sh", "content": "#!/bin/sh\necho hello\n", "executable": true},
				}})
			stdout := r.str("stdout")
			if !r.isError || r.str("status") != "RE" || r.out["exit_code"] != float64(4) || r.str("stderr") != "err\n" ||
				!strings.HasPrefix(stdout, "data\nhello\nxxx") || !strings.HasSuffix(stdout, "xxx") ||
				!strings.Contains(stdout, "bytes cut") || r.out["stdout_truncated"] != true {
				t.Errorf("run_command: status %s exit %v stderr %q stdout %d bytes (truncated %v)", r.str("status"), r.out["exit_code"], r.str("stderr"), len(stdout), r.out["stdout_truncated"])
			}
		})
	}
}

// A bad argument is a tool error that names the field; the run never
// starts.
func TestBadArguments(t *testing.T) {
	s := startService(t)
	cs := s.stdio(t, nil)
	for _, tc := range []struct {
		tool  string
		args  map[string]any
		field string
	}{
		{"run_code", map[string]any{"language": "cobol", "code": "x"}, "lang"},
		{"run_code", map[string]any{"language": "python", "code": "x", "memory_mb": -5}, "memory_mb"},
		{"run_code", map[string]any{"code": "x"}, "language"},
		{"run_command", map[string]any{"command": "true", "time_limit_seconds": -1}, "time_limit_seconds"},
		{"run_command", map[string]any{"command": "true", "files": []map[string]any{{"path": "a", "content": "!", "encoding": "base64"}}}, "files[0].content"},
		{"run_command", map[string]any{"command": "true", "files": []map[string]any{{"path": "x", "content": "x", "encoding": "gzip"}}}, "files[0].encoding"},
		{"session_run_code", map[string]any{"session_id": "nope", "code": "1"}, "session"},
		{"create_session", map[string]any{"lifetime_seconds": 1e9}, "lifetime_seconds"},
	} {
		r := callTool(t, cs, tc.tool, tc.args)
		if !r.isError || !strings.Contains(r.text, tc.field) {
			t.Errorf("%s %v: want an error naming %q, got %v %q", tc.tool, tc.args, tc.field, r.isError, r.text)
		}
	}
}

func TestSessionTools(t *testing.T) {
	s := startService(t)
	for _, tr := range s.transports() {
		t.Run(tr.name, func(t *testing.T) {
			cs := tr.cs(t)
			r := callTool(t, cs, "create_session", map[string]any{"lifetime_seconds": 120})
			id := r.str("session_id")
			if r.isError || id == "" {
				t.Fatalf("create_session: %+v", r)
			}
			if r := callTool(t, cs, "session_run_code", map[string]any{"session_id": id, "code": "x = 20\nimport math"}); r.isError {
				t.Fatalf("session_run_code: %+v", r)
			}
			r = callTool(t, cs, "session_run_code", map[string]any{"session_id": id, "code": "print('seen', math.pi > 3)\nx * 2 + 2"})
			if r.isError || r.str("result") != "42" || r.str("stdout") != "seen True\n" || r.out["execution_count"] != float64(2) {
				t.Errorf("state kept across calls: %+v", r)
			}
			r = callTool(t, cs, "session_run_code", map[string]any{"session_id": id, "code": "undefined_name"})
			e, _ := r.out["error"].(map[string]any)
			if !r.isError || e["name"] != "NameError" {
				t.Errorf("an exception in a session: %+v", r)
			}
			// Bash, in an interpreter of its own: x is Python's.
			callTool(t, cs, "session_run_code", map[string]any{"session_id": id, "code": "x=sh", "language": "bash"})
			if r := callTool(t, cs, "session_run_code", map[string]any{"session_id": id, "code": "echo $x", "language": "bash"}); r.isError || r.str("stdout") != "sh\n" {
				t.Errorf("bash in a session: %+v", r)
			}
			if r := callTool(t, cs, "session_write_file", map[string]any{"session_id": id, "path": "dir/in.txt", "content": "hello"}); r.isError {
				t.Fatalf("session_write_file: %+v", r)
			}
			r = callTool(t, cs, "session_run_command", map[string]any{"session_id": id, "command": "tr a-z A-Z < dir/in.txt > out.txt; printf '\\377' > bin; sleep 5", "timeout_seconds": 0.5})
			if !r.isError || r.str("status") != "TO" {
				t.Errorf("a command past its timeout: %+v", r)
			}
			r = callTool(t, cs, "session_read_file", map[string]any{"session_id": id, "path": "/box/out.txt"})
			if r.isError || r.str("content") != "HELLO" || r.str("encoding") != "text" {
				t.Errorf("session_read_file: %+v", r)
			}
			r = callTool(t, cs, "session_read_file", map[string]any{"session_id": id, "path": "bin"})
			if r.isError || r.str("content") != "/w==" || r.str("encoding") != "base64" {
				t.Errorf("session_read_file of bytes: %+v", r)
			}
			r = callTool(t, cs, "session_list_files", map[string]any{"session_id": id})
			if r.isError || !strings.Contains(r.text, "out.txt") || !strings.Contains(r.text, "dir") {
				t.Errorf("session_list_files: %+v", r)
			}
			if r := callTool(t, cs, "close_session", map[string]any{"session_id": id}); r.isError {
				t.Errorf("close_session: %+v", r)
			}
			if r := callTool(t, cs, "session_run_command", map[string]any{"session_id": id, "command": "true"}); !r.isError {
				t.Errorf("a closed session still answers: %+v", r)
			}
		})
	}
}

// A session belongs to its MCP connection: it ends when the connection
// does, unless it was kept.
func TestSessionsEndWithTheConnection(t *testing.T) {
	s := startService(t)
	for _, tr := range s.transports() {
		t.Run(tr.name, func(t *testing.T) {
			cs := tr.cs(t)
			gone := callTool(t, cs, "create_session", nil).str("session_id")
			kept := callTool(t, cs, "create_session", map[string]any{"keep": true, "lifetime_seconds": 60}).str("session_id")
			if ids := s.sessions(t); !slices.Contains(ids, gone) || !slices.Contains(ids, kept) {
				t.Fatalf("sessions %v, want %s and %s", ids, gone, kept)
			}
			cs.Close()
			deadline := time.Now().Add(20 * time.Second)
			for slices.Contains(s.sessions(t), gone) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			ids := s.sessions(t)
			if slices.Contains(ids, gone) || !slices.Contains(ids, kept) {
				t.Errorf("after the connection closed: sessions %v; want %s gone and %s kept", ids, gone, kept)
			}
			req, _ := http.NewRequest(http.MethodDelete, "http://isolate/v1/sessions/"+kept, nil)
			if resp, err := s.apiClient().Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
}

// A user who is not root gets a caller's rights and caps, and never
// another caller's sessions.
func TestNotRootCaller(t *testing.T) {
	s := startService(t)
	root := s.stdio(t, nil)
	nobody := s.stdio(t, &syscall.Credential{Uid: 65534, Gid: 65534})
	r := callTool(t, nobody, "run_command", map[string]any{"command": "id -u"})
	if r.isError || r.str("stdout") == "" {
		t.Fatalf("nobody's run: %+v", r)
	}
	r = callTool(t, nobody, "run_code", map[string]any{"language": "python", "code": "pass", "time_limit_seconds": 5})
	if !r.isError || !strings.Contains(r.text, "cpu_time_ms") || !strings.Contains(r.text, "maximum") {
		t.Errorf("beyond the service's --max-time: %+v", r)
	}
	if d := callTool(t, nobody, "describe_sandbox", nil); d.isError || !strings.Contains(d.text, "cpu_time_ms: 2000") {
		t.Errorf("nobody's limits: %+v", d)
	}
	if d := callTool(t, root, "describe_sandbox", nil); d.isError || !strings.Contains(d.text, "python") || !strings.Contains(d.text, "session code languages: python, javascript, bash") || d.out["version"] == "" {
		t.Errorf("languages and version: %+v", d)
	}
	id := callTool(t, root, "create_session", nil).str("session_id")
	r = callTool(t, nobody, "session_run_command", map[string]any{"session_id": id, "command": "true"})
	if !r.isError || !strings.Contains(r.text, "no such session") {
		t.Errorf("nobody ran a command in root's session: %+v", r)
	}
}

// With no service to reach, `isolate mcp` starts one of its own for the
// connection, with its user's rights (here nobody, without root, on
// rlimits where no cgroup is delegated), and stops it with the
// connection, leaving nothing in its temporary directory.
func TestStdioStartsItsOwnService(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run as nobody")
	}
	tmp, err := os.MkdirTemp("", "isolate-mcp-own-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	os.Chmod(tmp, 0o777)
	cmd := exec.Command(bin, "mcp", "--allow-rlimit-only")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + tmp}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cs := connect(t, &sdk.CommandTransport{Command: cmd})
	r := callTool(t, cs, "run_command", map[string]any{"command": "echo own; id -u"})
	if r.isError || r.str("stdout") != "own\n1000\n" {
		t.Errorf("a run through its own service: %+v", r)
	}
	cs.Close()
	left, _ := filepath.Glob(filepath.Join(tmp, "isolate-mcp-*"))
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// Rich results of a session's code come back as their text forms in the
// structured result and their images as image content.
func TestSessionRichResultsAsImages(t *testing.T) {
	s := startService(t)
	cs := s.stdio(t, nil)
	id := callTool(t, cs, "create_session", nil).str("session_id")
	code := `import base64
class Dot:
    def _repr_png_(self):
        return base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    def _repr_html_(self):
        return "<b>dot</b>"
Dot()`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "session_run_code", Arguments: map[string]any{"session_id": id, "code": code}})
	if err != nil || res.IsError {
		t.Fatalf("session_run_code: %v %+v", err, res)
	}
	var png []byte
	for _, c := range res.Content {
		if img, ok := c.(*sdk.ImageContent); ok && img.MIMEType == "image/png" {
			png = img.Data
		}
	}
	if !strings.HasPrefix(string(png), "\x89PNG") {
		t.Errorf("no PNG image content: %+v", res.Content)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(b), `"html":"\u003cb\u003edot\u003c/b\u003e"`) && !strings.Contains(string(b), `"html":"<b>dot</b>"`) {
		t.Errorf("structured results: %s", b)
	}
}

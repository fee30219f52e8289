package server

// Sessions over a real service and real boxes, as root: state kept from
// one command to the next, a server in the box reached by a later
// command, the lease and the idle time ending a session while something
// runs in it (nothing left: no process, no cgroup), a thousand sessions
// with nothing leaked and the service's memory flat, and files streamed
// through the service larger than its body buffer.

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// session makes a session on s and deletes it when the test ends.
func (s *service) session(t *testing.T, body string) string {
	t.Helper()
	code, b := s.do(t, "POST", "/v1/sessions", body)
	var a struct{ ID string }
	if json.Unmarshal(b, &a); code != http.StatusCreated || a.ID == "" {
		t.Fatalf("POST /v1/sessions %s: %d %s", body, code, b)
	}
	t.Cleanup(func() { s.do(t, "DELETE", "/v1/sessions/"+a.ID, "") })
	return a.ID
}

// command runs a foreground command in session id and returns its report.
func (s *service) command(t *testing.T, id string, args ...string) *api.Report {
	t.Helper()
	code, b := s.do(t, "POST", "/v1/sessions/"+id+"/commands", mustJSON(map[string]any{"args": args, "timeout_ms": 60000}))
	var rep api.Report
	if err := json.Unmarshal(b, &rep); err != nil || code != 200 {
		t.Fatalf("%q: %d %s", args, code, b)
	}
	return &rep
}

// hostPID is the host's pid of the process whose command line holds
// marker, or 0.
func hostPID(marker string) int {
	cmds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmds {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(marker)) && !bytes.Contains(b, []byte("-test.")) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	return 0
}

// cgroupsOf are the cgroup directories pid is in (each controller's, on
// the host).
func cgroupsOf(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[2] == "/" {
			continue
		}
		ctl := strings.TrimPrefix(f[1], "name=")
		if ctl == "" {
			ctl = "unified"
			if _, err := os.Stat("/sys/fs/cgroup/unified"); err != nil {
				dirs = append(dirs, filepath.Join("/sys/fs/cgroup", f[2]))
				continue
			}
		}
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", ctl, f[2]))
	}
	return dirs
}

// boxOf finds the process of a session's command by its marker (the
// command is started already) and returns its pid and box cgroups.
func boxOf(t *testing.T, marker string) (int, []boxCgroup) {
	t.Helper()
	var pid int
	waitFor(t, "the command's process", func() bool { pid = hostPID(marker); return pid != 0 })
	var own []boxCgroup
	var names []string
	for _, d := range cgroupsOf(t, pid) {
		// The service's own cgroup is not the box's.
		if mine := cgroupsOf(t, os.Getpid()); !contains(mine, d) {
			own = append(own, boxCgroup{d, inode(d)})
			names = append(names, d)
		}
	}
	if len(own) == 0 {
		t.Fatalf("process %d is in no cgroup of its own", pid)
	}
	t.Logf("process %d (%s) in %s", pid, marker, strings.Join(names, " "))
	return pid, own
}

// boxCgroup is a cgroup directory as a box had it: its name is the box
// id's, which another box may take once the session has ended.
type boxCgroup struct {
	path string
	ino  uint64
}

// inode is path's inode number, 0 if it is not there.
func inode(path string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// gone checks that nothing of a session is left: its process, its
// cgroups.
func gone(t *testing.T, marker string, cgroups []boxCgroup) {
	t.Helper()
	if processWith(marker) {
		t.Errorf("a process of the session (%s) is left", marker)
	}
	for _, d := range cgroups {
		// (The same name with another inode is another box's.)
		if ino := inode(d.path); ino != 0 && ino == d.ino {
			t.Errorf("the session's cgroup %s is left", d.path)
		}
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSessionKeepsStateOverHTTP(t *testing.T) {
	s := startService(t, nil)
	id := s.session(t, `{}`)
	if rep := s.command(t, id, "sh", "-c", "echo kept > /box/a.txt; echo $$ > /tmp/pid"); rep.Status != "OK" {
		t.Fatalf("write: %+v", rep)
	}
	if rep := s.command(t, id, "cat", "a.txt"); rep.Status != "OK" || rep.Stdout != "kept\n" || rep.Sandbox.Via != "service" {
		t.Fatalf("a later command read %q (%s %s)", rep.Stdout, rep.Status, rep.Message)
	}
	// The file through the files endpoints, both ways.
	if code, b := s.do(t, "GET", "/v1/sessions/"+id+"/files/a.txt", ""); code != 200 || string(b) != "kept\n" {
		t.Fatalf("GET a.txt: %d %q", code, b)
	}
	if code, b := s.do(t, "PUT", "/v1/sessions/"+id+"/files/dir/in.txt?mode=0600", "from the client"); code != 200 || !strings.Contains(string(b), `"size":15`) {
		t.Fatalf("PUT: %d %s", code, b)
	}
	if rep := s.command(t, id, "sh", "-c", "cat /box/dir/in.txt; stat -c %a /box/dir/in.txt"); rep.Stdout != "from the client600\n" {
		t.Fatalf("the box reads %q (%s %s)", rep.Stdout, rep.Status, rep.Message)
	}
	code, b := s.do(t, "GET", "/v1/sessions/"+id+"/files//tmp?list=1", "")
	if code != 200 || !strings.Contains(string(b), `"name":"pid"`) {
		t.Fatalf("list /tmp: %d %s", code, b)
	}
	if code, b := s.do(t, "GET", "/v1/sessions/"+id+"/files/nope", ""); code != 404 {
		t.Fatalf("a missing file: %d %s", code, b)
	}
	if code, b := s.do(t, "GET", "/v1/sessions/"+id+"/files/%2Fetc%2Fpasswd", ""); code != 400 || !strings.Contains(string(b), `"field":"path"`) {
		t.Fatalf("a file outside /box and /tmp: %d %s", code, b)
	}
	if code, b := s.do(t, "DELETE", "/v1/sessions/"+id+"/files/dir", ""); code != 204 {
		t.Fatalf("DELETE dir: %d %s", code, b)
	}
	if rep := s.command(t, id, "test", "-e", "/box/dir"); rep.Status != "RE" {
		t.Fatalf("dir after its deletion: %s", rep.Status)
	}
	// The session's description: usage, commands.
	code, b = s.do(t, "GET", "/v1/sessions/"+id, "")
	var info SessionAnswer
	if json.Unmarshal(b, &info); code != 200 || info.Usage == nil || info.Usage.MemoryPeak <= 0 || info.Usage.CPUTime <= 0 {
		t.Fatalf("describe: %d %s", code, b)
	}
	// A foreground command streamed.
	code, b = s.do(t, "POST", "/v1/sessions/"+id+"/commands", `{"args": ["sh", "-c", "echo out; echo err >&2"], "stream": true}`)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if code != 200 || len(lines) < 3 || !strings.Contains(string(b), `{"type":"stdout","data":"out\n"}`) ||
		!strings.Contains(string(b), `{"type":"stderr","data":"err\n"}`) || !strings.HasPrefix(lines[len(lines)-1], `{"type":"report","status":"OK"`) {
		t.Fatalf("streamed: %d %s", code, b)
	}
}

// A server started in the background is reached by a later command, and
// a background command's stdin is fed by later requests.
func TestSessionBackgroundServer(t *testing.T) {
	s := startService(t, nil)
	id := s.session(t, `{}`)
	if code, b := s.do(t, "PUT", "/v1/sessions/"+id+"/files/index.txt", "served from the box\n"); code != 200 {
		t.Fatalf("PUT: %d %s", code, b)
	}
	marker := fmt.Sprintf("8%03d", os.Getpid()%1000)
	code, b := s.do(t, "POST", "/v1/sessions/"+id+"/commands",
		`{"args": ["python3", "-m", "http.server", "--bind", "127.0.0.1", "`+marker+`"], "background": true, "cwd": "/box"}`)
	var bg struct {
		ID      uint64
		Running bool
	}
	if json.Unmarshal(b, &bg); code != 201 || !bg.Running {
		t.Fatalf("the server: %d %s", code, b)
	}
	// The client tries until the server listens: it is the command's
	// own loop, not a wait of the test's.
	client := `import time, urllib.request
for i in range(600):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:` + marker + `/index.txt").read().decode(), end="")
        break
    except OSError:
        time.sleep(0.05)`
	if rep := s.command(t, id, "python3", "-c", client); rep.Status != "OK" || rep.Stdout != "served from the box\n" {
		t.Fatalf("the client: %s %q %s %s", rep.Status, rep.Stdout, rep.Stderr, rep.Message)
	}
	proc := fmt.Sprintf("/v1/sessions/%s/commands/%d", id, bg.ID)
	if code, b := s.do(t, "GET", proc, ""); code != 200 || !strings.Contains(string(b), `"running":true`) {
		t.Fatalf("the server, later: %d %s", code, b)
	}
	if code, b := s.do(t, "POST", proc+"/signal", `{"signal": "TERM"}`); code != 200 {
		t.Fatalf("signal: %d %s", code, b)
	}
	code, b = s.do(t, "POST", proc+"/wait", `{"timeout_ms": 60000}`)
	var st waitAnswer
	if json.Unmarshal(b, &st); code != 200 || st.Running || st.Signal != 15 {
		t.Fatalf("the server after TERM: %d %s", code, b)
	}

	// stdin fed in pieces, then closed.
	code, b = s.do(t, "POST", "/v1/sessions/"+id+"/commands", `{"args": ["sh", "-c", "tr a-z A-Z"], "background": true, "stdin": "one "}`)
	if json.Unmarshal(b, &bg); code != 201 {
		t.Fatalf("tr: %d %s", code, b)
	}
	proc = fmt.Sprintf("/v1/sessions/%s/commands/%d", id, bg.ID)
	s.do(t, "POST", proc+"/stdin", "two ")
	if code, b := s.do(t, "POST", proc+"/stdin?close=1", "three"); code != 200 {
		t.Fatalf("stdin: %d %s", code, b)
	}
	code, b = s.do(t, "POST", proc+"/wait", `{"timeout_ms": 60000}`)
	if json.Unmarshal(b, &st); code != 200 || st.Stdout != "ONE TWO THREE" {
		t.Fatalf("tr's report: %d %s", code, b)
	}
	if code, b := s.do(t, "POST", proc+"/stdin", "more"); code != 409 {
		t.Fatalf("stdin of an ended command: %d %s", code, b)
	}

	// A write its command never reads does not outlive the command.
	code, b = s.do(t, "POST", "/v1/sessions/"+id+"/commands", `{"args": ["sleep", "600"], "background": true}`)
	if json.Unmarshal(b, &bg); code != 201 {
		t.Fatalf("sleep: %d %s", code, b)
	}
	proc = fmt.Sprintf("/v1/sessions/%s/commands/%d", id, bg.ID)
	written := make(chan int, 1)
	go func() {
		code, _ := s.do(t, "POST", proc+"/stdin", strings.Repeat("x", 4<<20))
		written <- code
	}()
	// Whether the write is blocked on the full pipe when the kill comes
	// or comes after it, it fails rather than hangs.
	if code, b := s.do(t, "POST", proc+"/signal", `{"signal": "KILL"}`); code != 200 {
		t.Fatalf("signal: %d %s", code, b)
	}
	if code := <-written; code != 409 {
		t.Errorf("a write to a command killed meanwhile: %d", code)
	}
}

// The lease ends a session while a foreground command runs (it answers
// XX); the idle time ends one while a background command runs. Nothing
// of either is left.
func TestSessionExpiryLeavesNothing(t *testing.T) {
	s := startService(t, nil)
	for _, c := range []struct{ name, session, command string }{
		{"lease", `{}`, `{"args": ["sleep", "%s"], "timeout_ms": 600000}`},
		{"idle", `{"idle_timeout_ms": 3000}`, `{"args": ["sleep", "%s"], "background": true}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, b := s.do(t, "POST", "/v1/sessions", c.session)
			var a struct{ ID string }
			if json.Unmarshal(b, &a); code != 201 {
				t.Fatalf("%d %s", code, b)
			}
			marker := fmt.Sprintf("%d.%d%d", 600+len(c.name), os.Getpid(), time.Now().UnixNano()%1000)
			answer := make(chan []byte, 1)
			go func() {
				_, b := s.do(t, "POST", "/v1/sessions/"+a.ID+"/commands", fmt.Sprintf(c.command, marker))
				answer <- b
			}()
			_, cgroups := boxOf(t, marker)
			if c.name == "lease" {
				// The lease, renewed to end a millisecond from now.
				if code, b := s.do(t, "POST", "/v1/sessions/"+a.ID+"/timeout", `{"timeout_ms": 1}`); code != 200 {
					t.Fatalf("renew: %d %s", code, b)
				}
				var rep api.Report
				if b := <-answer; json.Unmarshal(b, &rep) != nil || rep.Status != "XX" || rep.Message != "the session has ended" {
					t.Errorf("the command running at the lease's end: %s", b)
				}
			} else {
				<-answer // 201 at once
			}
			// Watched from inside: a request would be a use of it.
			waitFor(t, "the session to end", func() bool { return s.sessions.count() == 0 })
			s.sessions.ends.Wait() // (the registry forgets it before its box is closed)
			if code, b := s.do(t, "GET", "/v1/sessions/"+a.ID, ""); code != 404 {
				t.Errorf("the ended session: %d %s", code, b)
			}
			gone(t, marker, cgroups)
		})
	}
}

// Deleting a session kills what runs in it and leaves nothing; so does
// the service's shutdown.
func TestSessionDeleteAndShutdownLeaveNothing(t *testing.T) {
	s := startService(t, nil)
	var markers []string
	var cgroups [][]boxCgroup
	for i := range 2 {
		// Not s.session: the second one ends with the service.
		code, b := s.do(t, "POST", "/v1/sessions", `{}`)
		var a struct{ ID string }
		if json.Unmarshal(b, &a); code != 201 {
			t.Fatalf("%d %s", code, b)
		}
		id := a.ID
		markers = append(markers, fmt.Sprintf("%d.%d", 700+i, os.Getpid()))
		if code, b := s.do(t, "POST", "/v1/sessions/"+id+"/commands", `{"args": ["sleep", "`+markers[i]+`"], "background": true}`); code != 201 {
			t.Fatalf("%d %s", code, b)
		}
		_, cg := boxOf(t, markers[i])
		cgroups = append(cgroups, cg)
		if i == 0 {
			if code, b := s.do(t, "DELETE", "/v1/sessions/"+id, ""); code != 204 {
				t.Fatalf("DELETE: %d %s", code, b)
			}
			gone(t, markers[0], cgroups[0])
		}
	}
	s.Shutdown(5 * time.Second)
	gone(t, markers[1], cgroups[1])
}

// A thousand sessions made and deleted from four clients: none left,
// nothing leaked, the service's memory flat.
func TestManySessions(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a thousand sessions take a while")
	}
	const n, clients = 1000, 4
	needRoot(t)
	mgr, err := cgroup.NewManager(os.Getenv("ISOLATE_CGROUP_ROOT"))
	if err != nil {
		t.Fatal(err)
	}
	boxesBefore := map[string]bool{}
	for _, b := range mgr.Boxes() {
		boxesBefore[b] = true
	}
	// Box cgroups are checked once the service has stopped (cleanups run
	// last first), when its pool's boxes are gone too. Other test
	// binaries' come and go meanwhile: a leak is one new since the start
	// that stays.
	t.Cleanup(func() {
		newBoxes := func() (left []string) {
			for _, b := range mgr.Boxes() {
				if !boxesBefore[b] {
					left = append(left, b)
				}
			}
			return left
		}
		left := newBoxes()
		for deadline := time.Now().Add(time.Minute); len(left) > 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			left = newBoxes()
		}
		if len(left) > 0 {
			t.Errorf("box cgroups left: %s", strings.Join(left, " "))
		}
	})
	s := startService(t, func(c *Config) { c.Parallel = clients; c.MaxSessions = clients; c.MaxSessionsPerCaller = clients })
	underLoad(t, n, clients, 200, "session", func(int64) error {
		code, b := s.do(t, "POST", "/v1/sessions", `{}`)
		var a struct{ ID string }
		json.Unmarshal(b, &a)
		if code == 201 {
			// One command each, so that its box is used.
			code, b = s.do(t, "POST", "/v1/sessions/"+a.ID+"/commands", `{"args": ["true"]}`)
			if code == 200 {
				code, b = s.do(t, "DELETE", "/v1/sessions/"+a.ID, "")
			}
		}
		if code != 204 {
			return fmt.Errorf("%d %s", code, b)
		}
		return nil
	})
	if got := s.sessions.count(); got != 0 {
		t.Errorf("%d sessions left", got)
	}
}

// pattern is a reader of n bytes that are not all alike, made as read.
type pattern struct{ n, off int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.n-p.off)]
	for i := range b {
		b[i] = byte((p.off + int64(i)) * 7 / 3)
	}
	p.off += int64(len(b))
	return len(b), nil
}

// A file far larger than the service's body bound goes in and out of a
// session streamed: the service's memory does not grow by its size.
func TestSessionFilesStreamed(t *testing.T) {
	const size = 64 << 20
	s := startService(t, func(c *Config) { c.MaxBodyBytes = 1 << 20 })
	id := s.session(t, `{"tmp_size_bytes": 134217728, "file_size_bytes": 134217728, "memory_bytes": 268435456}`)
	before := rss(t)
	want := sha256.New()
	req, _ := http.NewRequest("PUT", "http://isolate/v1/sessions/"+id+"/files/big", io.TeeReader(&pattern{n: size}, want))
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), fmt.Sprintf(`"size":%d`, size)) {
		t.Fatalf("PUT: %d %s", resp.StatusCode, b)
	}
	if rep := s.command(t, id, "sh", "-c", "wc -c < /box/big"); strings.TrimSpace(rep.Stdout) != strconv.Itoa(size) {
		t.Fatalf("the box sees %q bytes", rep.Stdout)
	}
	resp, err = s.client.Get("http://isolate/v1/sessions/" + id + "/files/big")
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, resp.Body)
	resp.Body.Close()
	if err != nil || n != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("GET: %d bytes, %v, same bytes: %v", n, err, bytes.Equal(got.Sum(nil), want.Sum(nil)))
	}
	after := rss(t)
	t.Logf("RSS before %d KiB, after %d KiB", before>>10, after>>10)
	if after > before+size/2 {
		t.Errorf("resident memory grew from %d KiB to %d KiB for a %d MiB file", before>>10, after>>10, size>>20)
	}
	// Beyond the box's file system: 507, and the session lives on.
	req, _ = http.NewRequest("PUT", "http://isolate/v1/sessions/"+id+"/files/bigger", &pattern{n: 2 * size})
	resp, err = s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage {
		t.Errorf("a file beyond tmp_size_bytes: %d %s", resp.StatusCode, b)
	}
	if rep := s.command(t, id, "true"); rep.Status != "OK" {
		t.Errorf("after a full file system: %+v", rep)
	}
}

// Code in the session's default context keeps its state from one call
// to the next; a context of its own starts fresh; one that dies answers
// ContextDied and the next call runs in a fresh one.
func TestSessionCode(t *testing.T) {
	s := startService(t, nil)
	id := s.session(t, `{}`)
	code := func(body string) CodeAnswer {
		t.Helper()
		status, b := s.do(t, "POST", "/v1/sessions/"+id+"/code", body)
		var a CodeAnswer
		if err := json.Unmarshal(b, &a); err != nil || status != 200 {
			t.Fatalf("%s: %d %s", body, status, b)
		}
		return a
	}
	if a := code(`{"code": "x = 1"}`); a.Result != nil || a.Error != nil || a.ExecutionCount != 1 || a.Context == "" {
		t.Fatalf("x = 1: %+v", a)
	}
	a := code(`{"code": "print('hi')\nx + 1"}`)
	if a.Result == nil || *a.Result != "2" || a.Stdout != "hi\n" || a.ExecutionCount != 2 {
		t.Fatalf("x + 1: %+v", a)
	}
	if a := code(`{"code": "1/0"}`); a.Error == nil || a.Error.Name != "ZeroDivisionError" || !strings.Contains(a.Error.Traceback, "ZeroDivisionError") {
		t.Fatalf("1/0: %+v", a)
	}
	// Streamed: the output as it comes, then the execution.
	status, b := s.do(t, "POST", "/v1/sessions/"+id+"/code", `{"code": "import sys; print('out'); print('err', file=sys.stderr); x", "stream": true}`)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	streamed := map[string]string{}
	for _, l := range lines[:len(lines)-1] {
		var ev TypedEvent
		json.Unmarshal([]byte(l), &ev)
		streamed[ev.Type] += ev.Data
	}
	if status != 200 || streamed["stdout"] != "out\n" || streamed["stderr"] != "err\n" ||
		!strings.HasPrefix(lines[len(lines)-1], `{"type":"execution","result":"1"`) {
		t.Fatalf("streamed: %d %s", status, b)
	}
	// A context of its own: no x there.
	status, b = s.do(t, "POST", "/v1/sessions/"+id+"/contexts", `{"language": "python"}`)
	var ctx ContextState
	if json.Unmarshal(b, &ctx); status != 201 || ctx.ID == "" || ctx.Language != "python" {
		t.Fatalf("new context: %d %s", status, b)
	}
	if a := code(`{"code": "x", "context": "` + ctx.ID + `"}`); a.Error == nil || a.Error.Name != "NameError" || a.Context != ctx.ID {
		t.Fatalf("x in a fresh context: %+v", a)
	}
	status, b = s.do(t, "GET", "/v1/sessions/"+id, "")
	if desc := string(b); status != 200 || !strings.Contains(desc, `"execution_count":4`) || !strings.Contains(desc, `"id":"`+ctx.ID+`"`) {
		t.Fatalf("the session's contexts: %d %s", status, b)
	}
	if status, b := s.do(t, "DELETE", "/v1/sessions/"+id+"/contexts/"+ctx.ID, ""); status != 204 {
		t.Fatalf("delete the context: %d %s", status, b)
	}
	if status, b := s.do(t, "POST", "/v1/sessions/"+id+"/code", `{"code": "1", "context": "`+ctx.ID+`"}`); status != 404 {
		t.Fatalf("a deleted context: %d %s", status, b)
	}
	// The default context dies, then starts again.
	if a := code(`{"code": "import os; os._exit(3)"}`); a.Error == nil || a.Error.Name != "ContextDied" {
		t.Fatalf("os._exit: %+v", a)
	}
	if a := code(`{"code": "'x' in dir()"}`); !a.Restarted || a.ExecutionCount != 1 || a.Result == nil || *a.Result != "False" {
		t.Fatalf("after the context died: %+v", a)
	}
	// The call's bound interrupts the code.
	if a := code(`{"code": "while True: pass", "timeout_ms": 300}`); a.Error == nil || a.Error.Name != "KeyboardInterrupt" {
		t.Fatalf("a loop past timeout_ms: %+v", a)
	}
	if a := code(`{"code": "2 * 21"}`); a.Result == nil || *a.Result != "42" {
		t.Fatalf("after the interrupt: %+v", a)
	}
	type answered struct {
		status int
		body   []byte
	}
	// A context deleted while its code runs: the call answers so.
	status, b = s.do(t, "POST", "/v1/sessions/"+id+"/contexts", `{}`)
	if json.Unmarshal(b, &ctx); status != 201 {
		t.Fatalf("new context: %d %s", status, b)
	}
	answer := make(chan answered, 1)
	go func() {
		status, b := s.do(t, "POST", "/v1/sessions/"+id+"/code",
			`{"context": "`+ctx.ID+`", "code": "import time\nopen('/box/started-`+ctx.ID+`', 'w').close()\nwhile True: time.sleep(1)"}`)
		answer <- answered{status, b}
	}()
	waitFor(t, "the code to run", func() bool {
		status, _ := s.do(t, "GET", "/v1/sessions/"+id+"/files/started-"+ctx.ID+"?stat=1", "")
		return status == 200
	})
	if status, b := s.do(t, "DELETE", "/v1/sessions/"+id+"/contexts/"+ctx.ID, ""); status != 204 {
		t.Fatalf("delete a context running code: %d %s", status, b)
	}
	if got := <-answer; got.status != 404 || !strings.Contains(string(got.body), `"field":"context"`) {
		t.Errorf("code of a context deleted meanwhile: %d %s", got.status, got.body)
	}

	// The lease ends while code runs: the call answers, the session is
	// gone.
	go func() {
		status, b := s.do(t, "POST", "/v1/sessions/"+id+"/code",
			`{"code": "import time\nopen('/box/started', 'w').close()\nwhile True: time.sleep(1)", "timeout_ms": 600000}`)
		answer <- answered{status, b}
	}()
	waitFor(t, "the code to run", func() bool {
		status, _ := s.do(t, "GET", "/v1/sessions/"+id+"/files/started?stat=1", "")
		return status == 200
	})
	if status, b := s.do(t, "POST", "/v1/sessions/"+id+"/timeout", `{"timeout_ms": 1}`); status != 200 {
		t.Fatalf("renew: %d %s", status, b)
	}
	got := <-answer
	var ended CodeAnswer
	if json.Unmarshal(got.body, &ended); got.status != 200 || ended.Error == nil || ended.Error.Name != "ContextDied" || ended.Error.Value != "the session has ended" {
		t.Errorf("code running at the lease's end: %d %s", got.status, got.body)
	}
	waitFor(t, "the session to end", func() bool { return s.sessions.count() == 0 })
}

// A code call's captured output is held in its caller's budget as a
// run's is: one that alone would hold more than the budget gets 400 and
// runs nothing; within it the call runs, and once answered its caller
// holds nothing.
func TestSessionCodeOutputIsHeld(t *testing.T) {
	ledger := caller.NewLedger(caller.Budget{Bytes: 3 << 20, TotalBytes: 64 << 20})
	s := startService(t, func(c *Config) { c.Ledger = ledger })
	big := s.session(t, `{"output_limit_bytes": 2097152}`)
	status, b := s.do(t, "POST", "/v1/sessions/"+big+"/code", `{"code": "print('ran')"}`)
	if status != 400 || !strings.Contains(string(b), "--max-held-bytes-per-caller") {
		t.Fatalf("a code call holding 4 MiB of a budget of 3: %d %s, want 400", status, b)
	}
	small := s.session(t, `{"output_limit_bytes": 1048576}`)
	status, b = s.do(t, "POST", "/v1/sessions/"+small+"/code", `{"code": "print('x' * 1000000)"}`)
	var a CodeAnswer
	if json.Unmarshal(b, &a); status != 200 || len(a.Stdout) != 1000001 {
		t.Fatalf("a code call within the budget: %d, %d bytes of stdout", status, len(a.Stdout))
	}
	if total, _ := ledger.Total(); total.Bytes != 0 {
		t.Errorf("once answered, the ledger holds %d bytes", total.Bytes)
	}
}

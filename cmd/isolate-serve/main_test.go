package main

// The service as a process: SIGKILL leaves no box running, and the next
// start removes what the killed one left (box cgroups, stored files, a
// stale socket); SIGTERM stops it cleanly. The test binary is the
// service: started with serveChildEnv set, it runs serve() instead of
// the tests.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/internal/cgtest"
	"github.com/isolate-sandbox/isolate/internal/fdtest"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

const serveChildEnv = "ISOLATE_SERVE_TEST_CHILD"

func TestMain(m *testing.M) {
	boxinit.MaybeInit()
	if os.Getenv(serveChildEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type child struct {
	cmd  *exec.Cmd
	sock string
	log  *bytes.Buffer
}

func startChild(t testing.TB, dir string, args ...string) *child {
	t.Helper()
	c := &child{sock: filepath.Join(dir, "api.sock"), log: &bytes.Buffer{}}
	c.cmd = exec.Command(os.Args[0], append([]string{"--socket", c.sock, "--store", filepath.Join(dir, "files"), "--grace", "10s"}, args...)...)
	c.cmd.Env = append(os.Environ(), serveChildEnv+"=1")
	c.cmd.Stderr = c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A test that fails before it stops its service still leaves none:
	// the service's boxes die with it (parent-death signal).
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	fdtest.WaitFor(t, "the service answers", func() bool {
		code, _ := c.get("/v1/version")
		return code == 200
	})
	return c
}

func (c *child) client() *http.Client {
	// One connection per request, closed after it: the service bounds the
	// connections one uid holds, and a transport per call would leave each
	// idle connection open.
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.sock)
	}}}
}

func (c *child) get(path string) (int, string) {
	resp, err := c.client().Get("http://isolate" + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (c *child) post(path, body string) (int, string) {
	resp, err := c.client().Post("http://isolate"+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func processWith(marker string) bool {
	cmds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmds {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(marker)) {
			return true
		}
	}
	return false
}

// boxOf is the name of the box cgroup of the process whose command line
// holds marker.
func boxOf(t *testing.T, marker string) string {
	t.Helper()
	cmds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmds {
		if b, err := os.ReadFile(p); err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup"))
		for _, part := range strings.FieldsFunc(string(cg), func(r rune) bool { return r == '/' || r == '\n' }) {
			if strings.HasPrefix(part, "box-") {
				return part
			}
		}
	}
	t.Fatalf("no box cgroup for %s", marker)
	return ""
}

// childrenOf lists the children of process pid, from each of its
// threads' lists (the boxes' inits are the forking thread's).
func childrenOf(pid int) []int {
	var kids []int
	lists, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, l := range lists {
		b, _ := os.ReadFile(l)
		for _, f := range strings.Fields(string(b)) {
			kid, _ := strconv.Atoi(f)
			kids = append(kids, kid)
		}
	}
	return kids
}

// cgroupIno identifies box cgroup name's directory (on v1, that of the
// first controller, by name, that has one: a box need not use every
// controller), or is 0.
func cgroupIno(mgr *cgroup.Manager, name string) uint64 {
	parents := mgr.Parents()
	ctls := make([]string, 0, len(parents))
	for c := range parents {
		ctls = append(ctls, c)
	}
	sort.Strings(ctls)
	var st syscall.Stat_t
	for _, c := range ctls {
		if syscall.Stat(filepath.Join(parents[c], name), &st) == nil {
			return st.Ino
		}
	}
	return 0
}

func anyAlive(pids []int) bool {
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			return true
		}
	}
	return false
}

func TestSIGKILLLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts sandboxes")
	}
	mgr, err := cgroup.NewManager(os.Getenv("ISOLATE_CGROUP_ROOT"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := startChild(t, dir)
	if code, body := c.post("/v1/files", "stored by the first service"); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	// A box id of its own, outside the judges' ids another test binary
	// names meanwhile (0-99): a box another run holds is rightly not
	// swept.
	go c.post("/v1/run", `{"commands":[{"box_id":997,"args":["/bin/sh","-c","sleep 30; : `+marker+`"]}]}`)
	fdtest.WaitFor(t, "the box runs", func() bool { return processWith(marker) })
	box := boxOf(t, marker)
	// A box built ahead runs a command, others wait for theirs.
	fdtest.WaitFor(t, "a box is built ahead", func() bool {
		_, b := c.get("/v1/health")
		return strings.Contains(b, `"pool":`) && !strings.Contains(b, `"pool":0`)
	})
	pooledMarker := marker + "-pooled"
	go c.post("/v1/run", `{"commands":[{"args":["/bin/sh","-c","sleep 30; : `+pooledMarker+`"]}]}`)
	fdtest.WaitFor(t, "the pooled box runs", func() bool { return processWith(pooledMarker) })
	pooledBox := boxOf(t, pooledMarker)
	// The next service's pool takes box ids from 0 up again: its box of
	// the same name is another cgroup (directory).
	pooledDir := cgroupIno(mgr, pooledBox)
	fdtest.WaitFor(t, "a box is built ahead again", func() bool {
		_, b := c.get("/v1/health")
		return strings.Contains(b, `"pool":`) && !strings.Contains(b, `"pool":0`)
	})
	inits := childrenOf(c.cmd.Process.Pid)
	if len(inits) < 3 {
		_, h := c.get("/v1/health")
		t.Fatalf("the service has %d children (inits), want the two running boxes' and a waiting one's (health: %s)", len(inits), h)
	}
	c.cmd.Process.Kill()
	c.cmd.Wait()
	// No box outlives the service, running or waiting.
	fdtest.WaitFor(t, "the boxes die with the service", func() bool {
		return !processWith(marker) && !processWith(pooledMarker) && !anyAlive(inits)
	})

	c2 := startChild(t, dir)
	if ents, _ := os.ReadDir(filepath.Join(dir, "files")); len(ents) != 1 || ents[0].Name() != ".isolate-store" {
		t.Errorf("the store kept files of the killed service: %v (want only its marker)", ents)
	}
	for _, b := range mgr.Boxes() {
		if b == box || b == pooledBox && cgroupIno(mgr, b) == pooledDir {
			t.Errorf("the killed service's box cgroup %s is still there", b)
		}
	}
	// An inline copy_in goes through the service's work directory.
	if code, body := c2.post("/v1/run", `{"commands":[{"args":["/bin/cat","in"],"copy_in":[{"path":"/box/in","text":"x"}]}]}`); code != 200 || !strings.Contains(body, `"status":"OK"`) {
		t.Fatalf("after the restart: %d %s", code, body)
	}
	c2.cmd.Process.Signal(syscall.SIGTERM)
	if err := c2.cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, c2.log)
	}
	// Neither the killed service's work directory (swept by the second)
	// nor the stopped one's (removed as it stopped) is left; only live
	// services' (other test binaries') are, locked.
	ents, _ := os.ReadDir("/run/isolate/work")
	for _, e := range ents {
		d := filepath.Join("/run/isolate/work", e.Name())
		fd, err := syscall.Open(d, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			t.Errorf("%s is left by a service that is gone", d)
		}
		syscall.Close(fd)
	}
	if _, err := os.Stat(c2.sock); !os.IsNotExist(err) {
		t.Errorf("the socket outlived the service: %v", err)
	}
}

// SIGTERM while the service starts (its pool already building boxes)
// drains once it has started: it exits 0 and leaves none of its boxes'
// cgroups, where the signal's default action left them.
func TestSIGTERMWhileStartingLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts sandboxes")
	}
	// A cgroup root of its own: what is in it is this service's.
	root, mgr := cgtest.Root(t, "isolate-serve-test")
	dir := t.TempDir()
	var log bytes.Buffer
	cmd := exec.Command(os.Args[0], "--socket", filepath.Join(dir, "api.sock"), "--store", filepath.Join(dir, "files"), "--pool", "4")
	cmd.Env = append(os.Environ(), serveChildEnv+"=1", "ISOLATE_CGROUP_ROOT="+root)
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var made []string
	fdtest.WaitFor(t, "the pool makes a box", func() bool {
		made = mgr.Boxes()
		return len(made) > 0
	})
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM while starting: %v\n%s", err, &log)
	}
	for _, b := range mgr.Boxes() {
		if slices.Contains(made, b) {
			t.Errorf("its box cgroup %s is left", b)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--listen", "127.0.0.1:0"},
		{"--parallel", "0"},
		{"extra"},
		{"--no-such-flag"},
		{"--write-timeout", "0s"},
		{"--max-conns-per-uid", "0"},
		{"--max-sessions", "0"},
		{"--max-sessions-per-caller", "0"},
		{"--session-max-timeout", "0s"},
		{"--max-background-per-caller", "0"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	// The service's own bounds are never off.
	for _, v := range []capFlags{{mem: "NaN"}, {time: "1x"}, {pids: "-1"}, {output: "unlimited"}, {output: "0"}, {output: "2G"}} {
		if _, err := v.parse(); err == nil {
			t.Errorf("%+v accepted", v)
		}
	}
	caps, err := capFlags{mem: "256M", time: "2s", output: "8M", cpus: "1.5"}.parse()
	if err != nil || caps.MemoryBytes != 256<<20 || caps.CPUTimeMs != 2000 || caps.OutputLimitBytes != 8<<20 || caps.CPUs != 1.5 {
		t.Fatalf("%+v %v", caps, err)
	}
	if _, err := (capFlags{cpus: "0"}).parse(); err == nil {
		t.Error("--max-cpus 0 accepted")
	}
	for _, q := range []quotaList{{"nobody=1,1s"}, {"default=x,1s"}, {"default=1"}, {"group:no-such-group-here=1,1s"}, {"tcp=1,-1s"}, {"queue=-1,1s"}} {
		if _, err := q.parse(time.Minute); err == nil {
			t.Errorf("--quota %v accepted", q)
		}
	}
	qs, err := quotaList{"default=600,5m", "group:0=0,0", "tcp=10,1m"}.parse(time.Minute)
	if err != nil || qs.Window != time.Minute || qs.Default.Runs != 600 || qs.Default.CPU != 5*time.Minute ||
		len(qs.Groups) != 1 || qs.Groups[0].GID != 0 || qs.TCP == nil || qs.TCP.Runs != 10 || qs.Queue != nil {
		t.Errorf("--quota: %+v %v", qs, err)
	}
}

// A group that does not exist yet is named with the commands that make it
// (README's `isolate serve --socket-group judges` needs the group first).
func TestUnknownGroupSaysHowToMakeIt(t *testing.T) {
	const name = "isolate-test-no-such-group"
	_, err := lookupGroup("--socket-group", name)
	if err == nil || !strings.Contains(err.Error(), "--socket-group "+name+": no such group") ||
		!strings.Contains(err.Error(), "`groupadd "+name+"`") {
		t.Errorf("an unknown group: %v", err)
	}
	if id, err := lookupGroup("--socket-group", "0"); err != nil || id != 0 {
		t.Errorf("gid 0: %d %v", id, err)
	}
}

// The service's threads sleep with boxinit.TimerSlack; its boxes'
// programs with the kernel's default.
func TestTimerSlack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts sandboxes")
	}
	c := startChild(t, t.TempDir())
	defer func() {
		c.cmd.Process.Signal(syscall.SIGTERM)
		c.cmd.Wait()
	}()
	code, body := c.post("/v1/run", `{"commands":[{"args":["/bin/cat","/proc/self/timerslack_ns"]}]}`)
	if code != 200 || !strings.Contains(body, `"stdout":"50000\n"`) {
		t.Errorf("the program's timer slack: %d %s", code, body)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", c.cmd.Process.Pid))
	if err != nil || len(tasks) < 2 {
		t.Fatalf("the service's threads: %v %v", tasks, err)
	}
	want := strconv.FormatInt(int64(boxinit.TimerSlack), 10)
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + task.Name() + "/timerslack_ns")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != want {
			t.Errorf("thread %s of the service: timer slack %s ns, want %s", task.Name(), got, want)
		}
	}
}

// A session ends with its service, stopped (SIGTERM) or killed: its
// processes die, its cgroup goes (at the next start, for a killed one),
// and its id is not found by the service started after.
func TestSessionsEndWithTheService(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts sandboxes")
	}
	mgr, err := cgroup.NewManager(os.Getenv("ISOLATE_CGROUP_ROOT"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		dir := t.TempDir()
		c := startChild(t, dir)
		code, body := c.post("/v1/sessions", `{}`)
		var s struct{ ID string }
		if json.Unmarshal([]byte(body), &s); code != 201 {
			t.Fatalf("session: %d %s", code, body)
		}
		marker := fmt.Sprintf("session-marker-%d", time.Now().UnixNano())
		if code, body := c.post("/v1/sessions/"+s.ID+"/commands", `{"args":["/bin/sh","-c","sleep 600; : `+marker+`"],"background":true}`); code != 201 {
			t.Fatalf("background command: %d %s", code, body)
		}
		fdtest.WaitFor(t, "the command runs", func() bool { return processWith(marker) })
		box := boxOf(t, marker)
		dirIno := cgroupIno(mgr, box)
		t.Logf("%v: session %s, box %s (cgroup inode %d)", sig, s.ID, box, dirIno)
		c.cmd.Process.Signal(sig)
		err := c.cmd.Wait()
		if sig == syscall.SIGTERM && err != nil {
			t.Fatalf("SIGTERM: %v\n%s", err, c.log)
		}
		fdtest.WaitFor(t, "the session's processes to die with the service", func() bool { return !processWith(marker) })
		c2 := startChild(t, dir)
		if code, body := c2.get("/v1/sessions/" + s.ID); code != 404 {
			t.Errorf("%v: the session after a restart: %d %s", sig, code, body)
		}
		for _, b := range mgr.Boxes() {
			if b == box && cgroupIno(mgr, b) == dirIno {
				t.Errorf("%v: the session's box cgroup %s is still there", sig, b)
			}
		}
		c2.cmd.Process.Signal(syscall.SIGTERM)
		if err := c2.cmd.Wait(); err != nil {
			t.Fatalf("SIGTERM: %v\n%s", err, c2.log)
		}
	}
}

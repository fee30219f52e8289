package main

// The handover itself (handover.c, package handover, isolate-serve
// --cli-socket), with services of the tests' own, so that these run in
// either mode of the suite: the caller's death, its signals, the
// service's death, the caller's rights, the opt-out, another build.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/internal/testbin"
	"github.com/isolate-sandbox/isolate/isolate"
)

// ownService starts a service of the test's own (flags args), stopped
// with the test.
func ownService(t *testing.T, args ...string) *service {
	t.Helper()
	svc, err := launchService(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.stop(); err != nil {
			t.Errorf("the test's service: %v", err)
		}
	})
	return svc
}

// handoverEnv is the environment of an isolate that hands its runs to
// sock ("": one that runs them in-process).
func handoverEnv(sock string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ISOLATE_") {
			env = append(env, kv)
		}
	}
	if d := os.Getenv("ISOLATE_COVERDIR"); d != "" {
		env = append(env, "GOCOVERDIR="+d)
	}
	if sock == "" {
		return append(env, "ISOLATE_NO_SERVICE=1")
	}
	return append(env, "ISOLATE_SERVICE_SOCKET="+sock)
}

// waitFor polls cond until it holds, or fails the test after a generous
// deadline (a machine under load is slow, never this slow).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
	}
}

// machineBox makes persistent box id in the machine's box root, where a
// service looks, and removes it after the test.
func machineBox(t *testing.T, id int) {
	t.Helper()
	for _, cmd := range []string{"--init", "--cleanup"} {
		c := exec.Command(isolateBin, "-b", strconv.Itoa(id), cmd)
		c.Env = handoverEnv("")
		if cmd == "--cleanup" {
			t.Cleanup(func() {
				if out, err := c.CombinedOutput(); err != nil {
					t.Errorf("--cleanup box %d: %v %s", id, err, out)
				}
			})
		} else if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("--init box %d: %v %s", id, err, out)
		}
	}
}

// The caller's death (SIGKILL: it cannot pass anything on) ends its run:
// the service sees the connection close and kills the box.
func TestHandoverCallerKilledKillsTheBox(t *testing.T) {
	needRoot(t)
	svc := ownService(t)
	cmd := exec.Command(isolateBin, append(append([]string{"run", "--box-id", "931"}, probe(t)...), "--", "/t/probe", "sleep", "100")...)
	cmd.Env = handoverEnv(svc.cliSock)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the program of box 931", func() bool { return boxHasProcess(931) })
	cmd.Process.Kill()
	cmd.Wait()
	waitFor(t, "box 931's processes to end", func() bool { return !boxHasProcess(931) })
	waitFor(t, "box 931's cgroup to go", func() bool { return len(boxCgroups("931")) == 0 })
}

// A signal to the CLI ends a handed-over run as it ends one in-process:
// same exit status, same report or meta file.
func TestHandoverSignalsAsInProcess(t *testing.T) {
	needRoot(t)
	svc := ownService(t)
	dir := shareDir(t)
	machineBox(t, 935)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGABRT} {
		for _, ioiForm := range []bool{false, true} {
			var ends [2]string
			for i, sock := range []string{"", svc.cliSock} {
				ends[i] = signalledRun(t, sock, dir, sig, ioiForm)
			}
			t.Logf("%v (ioi form %v): %s", sig, ioiForm, ends[1])
			if ends[0] != ends[1] {
				t.Errorf("%v (ioi form %v): in-process %s\nthrough the service %s", sig, ioiForm, ends[0], ends[1])
			}
		}
	}
}

// signalledRun starts a run that sleeps, sends sig to the CLI once the
// program runs, and describes how it ended: exit status or signal,
// report (status, message) or meta file.
func signalledRun(t *testing.T, sock, dir string, sig syscall.Signal, ioiForm bool) string {
	t.Helper()
	meta := filepath.Join(dir, "meta")
	os.Remove(meta)
	id := 932
	args := []string{"run", "--json", "-b", "932", "--", "/bin/sh", "-c", "sleep 60"}
	if ioiForm {
		id = 935
		args = []string{"-b", "935", "-M", meta, "-p2", "--run", "--", "/bin/sh", "-c", "sleep 60"}
	}
	cmd := exec.Command(isolateBin, args...)
	cmd.Env = handoverEnv(sock)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the program", func() bool { return len(boxProcesses(id, "sleep")) > 0 })
	cmd.Process.Signal(sig)
	cmd.Wait()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	end := fmt.Sprintf("exit %d signal %v", ws.ExitStatus(), ws.Signal())
	if !ws.Signaled() {
		end = fmt.Sprintf("exit %d", ws.ExitStatus())
	}
	var rep isolate.Report
	if json.Unmarshal([]byte(out.String()), &rep) == nil {
		end += fmt.Sprintf(", report %s %q", rep.Status, rep.Message)
	}
	if m, err := os.ReadFile(meta); err == nil {
		var keys []string
		for _, line := range strings.Split(string(m), "\n") {
			if k, _, _ := strings.Cut(line, ":"); k == "status" || k == "exitsig" || k == "message" || k == "killed" {
				keys = append(keys, line)
			}
		}
		end += ", meta " + strings.Join(keys, " ")
	}
	waitFor(t, "the box's processes and cgroup to be gone", func() bool { return len(boxLeftovers(id)) == 0 })
	return end + fmt.Sprintf(", %d stderr lines", strings.Count(errb.String(), "\n"))
}

// The service dying during a run leaves the caller a clear XX (exit 2,
// the message, the report or meta file it asked for), not a hang; a
// restarted service clears what the dead one left.
func TestHandoverServiceDiesMidRun(t *testing.T) {
	needRoot(t)
	svc := ownService(t)
	dir := shareDir(t)
	meta, metaAbbreviated := filepath.Join(dir, "meta"), filepath.Join(dir, "meta-abbreviated")
	machineBox(t, 934)
	machineBox(t, 936)
	for _, c := range []struct {
		args []string
		id   int
		meta string
	}{
		{[]string{"run", "--json", "-b", "933", "--", "/bin/sh", "-c", "sleep 60"}, 933, ""},
		{[]string{"-b", "934", "-M", meta, "-p2", "--run", "--", "/bin/sh", "-c", "sleep 60"}, 934, meta},
		// Long options abbreviated, as getopt_long takes them: the meta
		// file is found past options whose values follow them.
		{[]string{"--box", "936", "--chd", "/box", "--met", metaAbbreviated, "--proc", "--run", "--", "/bin/sh", "-c", "sleep 60"}, 936, metaAbbreviated},
	} {
		cmd := exec.Command(isolateBin, c.args...)
		cmd.Env = handoverEnv(svc.cliSock)
		cmd.Dir = dir
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("the program of box %d", c.id), func() bool { return len(boxProcesses(c.id, "sleep")) > 0 })
		svc.cmd.Process.Kill()
		<-svc.exited
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-done
			t.Fatalf("%q: the CLI hung after the service died", c.args)
		}
		if code := cmd.ProcessState.ExitCode(); code != 2 || errb.String() != "isolate: the service ended during the run\n" {
			t.Errorf("%q: exit %d, stderr %q", c.args, code, errb.String())
		}
		if c.args[0] == "run" {
			var rep isolate.Report
			if err := json.Unmarshal([]byte(out.String()), &rep); err != nil || rep.Status != isolate.StatusXX || rep.Message != "the service ended during the run" {
				t.Errorf("%q: report %q (%v)", c.args, out.String(), err)
			}
		} else if m, _ := os.ReadFile(c.meta); !strings.Contains(string(m), "status:XX\n") || !strings.Contains(string(m), "message:the service ended during the run\n") {
			t.Errorf("%q: meta file %q", c.args, m)
		}
		waitFor(t, fmt.Sprintf("box %d's processes to end", c.id), func() bool { return len(boxProcesses(c.id, "")) == 0 })
		// The service comes back, and clears what its death left.
		if err := svc.start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("box %d's cgroup to go", c.id), func() bool { return len(boxCgroups(strconv.Itoa(c.id))) == 0 })
	}
}

// Through the socket a caller gets its own rights, not the service's: a
// caller in the socket's group names a file only root may read and is
// refused; its own file works. A caller outside the group cannot
// connect, runs in-process, and gets what a user without root gets
// there (here: no delegated cgroup, no --allow-rlimit-only).
func TestHandoverCallersRights(t *testing.T) {
	needRoot(t)
	const group = 64123 // a group of its own, for this test's caller
	svc := ownService(t, "--socket-group", strconv.Itoa(group))
	dir := shareDir(t)
	secret := filepath.Join(dir, "secret")
	own := filepath.Join(dir, "own")
	os.WriteFile(secret, []byte("root only\n"), 0o600)
	os.WriteFile(own, []byte("mine\n"), 0o600)
	os.Chown(own, 65534, 65534)
	asNobody := func(groups []uint32, args ...string) (result, *isolate.Report) {
		cmd := exec.Command(isolateBin, args...)
		cmd.Env = handoverEnv(svc.cliSock)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups}}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		res := result{Stdout: out.String(), Stderr: errb.String(), Code: cmd.ProcessState.ExitCode()}
		var rep isolate.Report
		if json.Unmarshal([]byte(res.Stdout), &rep) != nil {
			return res, nil
		}
		return res, &rep
	}
	inGroup := []uint32{group}
	res, rep := asNobody(inGroup, "run", "--json", "--stdin", "own", "--", "/bin/cat")
	if res.Code != 0 || rep == nil || rep.Stdout != "mine\n" || rep.Sandbox.Via != "service" {
		t.Errorf("its own file: exit %d, report %+v, stderr %q", res.Code, rep, res.Stderr)
	}
	for _, args := range [][]string{
		{"run", "--json", "--stdin", secret, "--", "/bin/cat"},
		{"run", "--json", "--copy-in", secret + ":/box/s", "--", "/bin/cat", "s"},
		{"run", "--json", "--stdout", secret, "--", "/bin/echo", "overwritten"},
	} {
		res, rep := asNobody(inGroup, args...)
		if res.Code != 2 || rep != nil && rep.Status != isolate.StatusXX || strings.Contains(res.Stdout, "root only") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q: want refused, exit 2", args, res.Code, res.Stdout, res.Stderr)
		}
	}
	if got, _ := os.ReadFile(secret); string(got) != "root only\n" {
		t.Errorf("the caller wrote root's file: %q", got)
	}
	res, _ = asNobody(nil, "run", "--json", "--", "/bin/true")
	if res.Code != 2 || !strings.Contains(res.Stderr, "no cgroup v2 subtree is delegated to you") {
		t.Errorf("outside the socket's group: exit %d, stderr %q, want the in-process refusal", res.Code, res.Stderr)
	}
}

// ISOLATE_NO_SERVICE=1 keeps a run in-process; a service of another build
// declines, and the CLI runs in-process; the report says which path ran.
func TestHandoverOptOutAndOtherBuild(t *testing.T) {
	needRoot(t)
	svc := ownService(t)
	serve, err := serveBin()
	if err != nil {
		t.Fatal(err)
	}
	other := ownService(t, "--cli-binary", serve) // a build no isolate has
	for _, c := range []struct {
		env  []string
		want string
	}{
		{handoverEnv(svc.cliSock), "service"},
		{append(handoverEnv(svc.cliSock), "ISOLATE_NO_SERVICE=1"), "in-process"},
		{handoverEnv(other.cliSock), "in-process"},
	} {
		cmd := exec.Command(isolateBin, "run", "--json", "--", "/bin/true")
		cmd.Env = c.env
		out, err := cmd.Output()
		var rep isolate.Report
		if jerr := json.Unmarshal(out, &rep); err != nil || jerr != nil || rep.Status != isolate.StatusOK || rep.Sandbox.Via != c.want {
			t.Errorf("env %q: %v, report %s: want OK via %s", c.env[len(c.env)-1], err, out, c.want)
		}
	}
}

// After an upgrade, until the service restarts, the isolate CLI is
// another version than the one the service takes runs from. A member of
// the socket's group, whose run then goes in-process and cannot be made
// there without root, is told that first (both versions, and to restart
// the service), in both forms; the service's own isolate is still taken.
func TestHandoverOtherVersionSaysSo(t *testing.T) {
	needRoot(t)
	const group = 64124 // a group of its own, for this test's caller
	svc := ownService(t, "--socket-group", strconv.Itoa(group))
	serve, err := serveBin()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(serve, "--version").Output()
	serveVersion, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "isolate-serve ")
	if err != nil || !ok || serveVersion == "" {
		t.Fatalf("isolate-serve --version: %v, %q", err, out)
	}
	dir, err := os.MkdirTemp("", "isolate-upgraded-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755) // its caller is nobody
	upgraded := filepath.Join(dir, "isolate")
	const version = "9.9-upgraded"
	if err := testbin.Build(upgraded, ".", "-ldflags", "-X github.com/isolate-sandbox/isolate/cli.Version="+version); err != nil {
		t.Fatal(err)
	}
	asMember := func(bin string, args ...string) result {
		cmd := exec.Command(bin, args...)
		cmd.Env = handoverEnv(svc.cliSock)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{group}}}
		return runResult(t, cmd)
	}
	want := "the service on " + svc.cliSock + " did not take this run of isolate " + version +
		": it runs isolate " + serveVersion + " and takes runs only from the isolate binary it was started with"
	for _, args := range [][]string{
		{"run", "--json", "--", "/bin/true"},
		{"-b", "5", "--run", "--", "/bin/true"},
	} {
		res := asMember(upgraded, args...)
		if res.Code != 2 || !strings.Contains(res.Stderr, want) || !strings.Contains(res.Stderr, "restart it (systemctl restart isolate)") {
			t.Errorf("%q by a member, isolate of another version: exit %d, stderr %q\nwant it to say: %s", args, res.Code, res.Stderr, want)
		}
	}
	res := asMember(isolateBin, "run", "--json", "--", "/bin/true")
	var rep isolate.Report
	if json.Unmarshal([]byte(res.Stdout), &rep) != nil || res.Code != 0 || rep.Sandbox.Via != "service" {
		t.Errorf("the service's own isolate, by a member: exit %d, stdout %q, stderr %q", res.Code, res.Stdout, res.Stderr)
	}
}

// A handed-over run's report, with --json and --report, costs the
// service its kept output once, not a multiple: the report is written
// out in pieces, never encoded whole in memory.
func TestHandoverJSONLeavesTheServiceSmall(t *testing.T) {
	needRoot(t)
	svc := ownService(t)
	const limit = 16 << 20
	cmd := exec.Command(isolateBin, "run", "--json", "--report", filepath.Join(t.TempDir(), "report.json"), "--output-limit", "16M",
		"--", "/bin/sh", "-c", "head -c 16777216 /dev/zero; head -c 16777216 /dev/zero >&2")
	cmd.Env = handoverEnv(svc.cliSock)
	var out countingWriter
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, svc.log())
	}
	// Two streams of 16 MiB, six bytes of JSON each: 192 MiB written.
	if out.n < 12*limit {
		t.Fatalf("%d bytes of JSON, want the two streams", out.n)
	}
	// The service, its two kept streams and slack (81 MiB measured).
	// Encoded whole, the report took 964 MiB.
	if peak := peakRSS(t, svc.cmd.Process.Pid); peak > 128<<20 {
		t.Errorf("the service's peak resident set is %d MiB after one handed-over run keeping 2 x %d MiB", peak>>20, limit>>20)
	}
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// peakRSS is process pid's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// A handed-over run counts against its caller's quota as an API request
// does: past the window's runs, or once the CPU time its settled runs
// took reached the quota, the CLI exits 2 saying so, and runs nothing.
func TestHandoverOverQuotaExits2(t *testing.T) {
	needRoot(t)
	const group = 64124
	svc := ownService(t, "--socket-group", strconv.Itoa(group), "--quota", "default=0,300ms", "--quota-window", "1h")
	asMember := func(args ...string) result {
		cmd := exec.Command(isolateBin, args...)
		cmd.Env = handoverEnv(svc.cliSock)
		cmd.Dir = shareDir(t)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{group}}}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		return result{Stdout: out.String(), Stderr: errb.String(), Code: cmd.ProcessState.ExitCode()}
	}
	// Half a second of CPU: past the quota's 300 ms once the run settled
	// (its charge may follow the CLI's exit by a moment).
	if res := asMember("run", "--time", "5", "--", "/bin/sh", "-c", "i=0; while [ $i -lt 2000000 ]; do i=$((i+1)); done"); res.Code != 0 {
		t.Fatalf("the first run: exit %d, stderr %q", res.Code, res.Stderr)
	}
	var res result
	waitFor(t, "a run refused once the CPU time was used", func() bool {
		res = asMember("run", "--json", "--", "/bin/true")
		return res.Code != 0
	})
	if res.Code != 2 || !strings.Contains(res.Stderr, "over quota: this caller's CPU time") || res.Stdout != "" {
		t.Errorf("a run once its CPU time was used: exit %d, stdout %q, stderr %q, want 2, over quota and no report", res.Code, res.Stdout, res.Stderr)
	}
	// A service that counts runs alone refuses the third in the window.
	svc = ownService(t, "--socket-group", strconv.Itoa(group), "--quota", "default=2,0", "--quota-window", "1h")
	for i, want := range []int{0, 0, 2} {
		res := asMember("run", "--", "/bin/true")
		if res.Code != want || want == 2 && !strings.Contains(res.Stderr, "over quota: this caller's runs in this window reached 2") {
			t.Errorf("run %d: exit %d, stderr %q, want %d", i+1, res.Code, res.Stderr, want)
		}
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/isolate"
)

var (
	probeOnce sync.Once
	probeDir  string
	probeErr  error
)

// probe builds internal/bench/testdata/probe.c once (static) and returns the options that
// bind it into a box at /t/probe.
func probe(t testing.TB) []string {
	t.Helper()
	probeOnce.Do(func() {
		probeDir, probeErr = os.MkdirTemp("", "isolate-probe-")
		if probeErr != nil {
			return
		}
		os.Chmod(probeDir, 0o755)
		out, err := exec.Command("gcc", "-O1", "-static", "-pthread", "-o", filepath.Join(probeDir, "probe"), "../../internal/bench/testdata/probe.c").CombinedOutput()
		if err != nil {
			probeErr = fmt.Errorf("gcc probe.c: %v\n%s", err, out)
		}
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return []string{"--bind", probeDir + ":/t"}
}

// box runs the probe in a box: opts, then "--", then the probe's args.
func box(t testing.TB, opts []string, args ...string) (*isolate.Report, int) {
	t.Helper()
	all := append(append(probe(t), opts...), "--", "/t/probe")
	return runBox(t, append(all, args...)...)
}

func TestReportHasEveryContractField(t *testing.T) {
	needRoot(t)
	res := isolateCmd(t, "", "run", "--json", "--", "/bin/true")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(res.Stdout), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"status", "message", "exit_code", "signal", "killed", "limit", "cpu_time", "user_time",
		"sys_time", "wall_time", "memory_peak", "max_rss", "oom_killed", "pids_peak", "csw_voluntary", "csw_involuntary",
		"stdout", "stderr", "stdout_truncated", "stderr_truncated", "blocked_syscalls", "box_id", "sandbox"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	sb, _ := m["sandbox"].(map[string]any)
	for _, k := range []string{"image", "cgroup", "seccomp", "setup_time", "teardown_time"} {
		if _, ok := sb[k]; !ok {
			t.Errorf("report lacks sandbox.%s", k)
		}
	}
	if m["status"] != "OK" || sb["image"] != "host" || sb["seccomp"] != "default" {
		t.Errorf("unexpected report: %s", res.Stdout)
	}
	if bs, ok := m["blocked_syscalls"].([]any); !ok || len(bs) != 0 {
		t.Errorf("blocked_syscalls = %v, want []", m["blocked_syscalls"])
	}
}

// The program sleeps with the kernel's default timer slack, not the
// supervisor's (boxinit.TimerSlack), on either path.
func TestProgramTimerSlack(t *testing.T) {
	needRoot(t)
	res := isolateCmd(t, "", "run", "--", "/bin/cat", "/proc/self/timerslack_ns")
	if res.Code != 0 || res.Stdout != "50000\n" {
		t.Fatalf("exit %d, timer slack %q: %s", res.Code, res.Stdout, res.Stderr)
	}
}

func TestExitStatusAndStatuses(t *testing.T) {
	needRoot(t)
	rep, code := box(t, nil, "exit", "0")
	expectStatus(t, rep, isolate.StatusOK)
	if code != 0 {
		t.Errorf("isolate exit %d for OK, want 0", code)
	}
	rep, code = box(t, nil, "exit", "7")
	expectStatus(t, rep, isolate.StatusRE)
	if rep.ExitCode != 7 || code != 1 {
		t.Errorf("exit_code %d isolate exit %d, want 7 and 1", rep.ExitCode, code)
	}
	rep, code = box(t, nil, "abort")
	expectStatus(t, rep, isolate.StatusSG)
	if rep.Signal != int(syscall.SIGABRT) || code != 1 {
		t.Errorf("abort: signal %d exit %d, want SIGABRT and 1", rep.Signal, code)
	}
	rep, _ = box(t, nil, "kill9")
	expectStatus(t, rep, isolate.StatusSG)
	if rep.Signal != 9 || rep.Killed {
		t.Errorf("kill -9 self: signal %d killed %v, want 9 and not killed by the sandbox", rep.Signal, rep.Killed)
	}
	rep, _ = runBox(t, "--", "/bin/sh", "-c", "kill -9 $$")
	expectStatus(t, rep, isolate.StatusSG)
	if rep.Signal != 9 {
		t.Errorf("sh kill -9 $$: signal %d, want 9", rep.Signal)
	}
	rep, code = runBox(t, "--", "/no/such/program")
	expectStatus(t, rep, isolate.StatusRE)
	if rep.ExitCode != 127 || !strings.Contains(rep.Message, "/no/such/program") || code != 1 {
		t.Errorf("missing program: exit_code %d message %q isolate exit %d", rep.ExitCode, rep.Message, code)
	}
}

func TestCPULimitAndAccounting(t *testing.T) {
	needRoot(t)
	rep, _ := box(t, nil, "spin", "0.5")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.CPUTime < 0.49 || rep.CPUTime > 0.52 {
		t.Errorf("0.5 s spin reported cpu_time %.4f, want 0.49-0.52", rep.CPUTime)
	}
	if d := rep.CPUTime - rep.UserTime - rep.SysTime; d > 1e-9 || d < -1e-9 {
		t.Errorf("cpu_time %.6f != user %.6f + sys %.6f", rep.CPUTime, rep.UserTime, rep.SysTime)
	}
	own, _ := strconv.ParseFloat(strings.TrimSpace(rep.Stdout), 64)
	if own == 0 || (rep.CPUTime-own)/own > 0.02 || (rep.CPUTime-own)/own < -0.02 {
		t.Errorf("cpu_time %.4f differs from the program's own %.4f by more than 2%%", rep.CPUTime, own)
	}

	rep, code := box(t, []string{"--time", "0.3"}, "forever")
	expectStatus(t, rep, isolate.StatusTO)
	if rep.Limit != "cpu" || !rep.Killed || code != 1 {
		t.Errorf("limit %q killed %v exit %d, want cpu, true, 1", rep.Limit, rep.Killed, code)
	}
	if rep.CPUTime < 0.3 || rep.CPUTime > 0.32 {
		t.Errorf("killed at cpu_time %.4f for a 0.3 s limit, want 0.30-0.32 (at most 20 ms over)", rep.CPUTime)
	}

	// Two threads: CPU time of both counts, and the limit covers them.
	rep, _ = box(t, nil, "threads", "2", "0.3")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.CPUTime < 0.59 || rep.CPUTime > 0.63 {
		t.Errorf("2 threads × 0.3 s reported cpu_time %.4f, want about 0.6", rep.CPUTime)
	}
	rep, _ = box(t, []string{"--time", "0.2"}, "threads", "2", "5")
	expectStatus(t, rep, isolate.StatusTO)
	if rep.CPUTime < 0.2 || rep.CPUTime > 0.24 {
		t.Errorf("2 spinning threads killed at cpu_time %.4f for a 0.2 s limit", rep.CPUTime)
	}
}

func TestExtraTime(t *testing.T) {
	needRoot(t)
	// Over the limit but within the extra time: runs to its end, still TO.
	rep, _ := box(t, []string{"--time", "0.1", "--extra-time", "0.5"}, "spin", "0.3")
	expectStatus(t, rep, isolate.StatusTO)
	if rep.Killed || rep.Limit != "cpu" || !strings.HasPrefix(rep.Stdout, "0.3") {
		t.Errorf("killed %v limit %q stdout %q: want not killed, cpu, the program's own output", rep.Killed, rep.Limit, rep.Stdout)
	}
	rep, _ = box(t, []string{"--time", "0.1", "--extra-time", "0.1"}, "forever")
	expectStatus(t, rep, isolate.StatusTO)
	if !rep.Killed || rep.CPUTime < 0.2 || rep.CPUTime > 0.22 {
		t.Errorf("killed %v at %.4f, want killed at 0.2 s", rep.Killed, rep.CPUTime)
	}
}

func TestWallLimit(t *testing.T) {
	needRoot(t)
	rep, _ := box(t, []string{"--wall-time", "0.3"}, "sleep", "10")
	expectStatus(t, rep, isolate.StatusTO)
	if rep.Limit != "wall" || !rep.Killed || rep.WallTime < 0.3 || rep.WallTime > 0.5 {
		t.Errorf("limit %q killed %v wall %.3f, want wall, true, 0.3-0.5", rep.Limit, rep.Killed, rep.WallTime)
	}
}

func TestMemoryLimitAndPeak(t *testing.T) {
	needRoot(t)
	rep, _ := box(t, []string{"--mem", "300M"}, "touch", "200")
	expectStatus(t, rep, isolate.StatusOK)
	const mib = 1 << 20
	if rep.MemoryPeak < 200*mib || rep.MemoryPeak > 206*mib {
		t.Errorf("200 MiB touched: memory_peak %.1f MiB, want 200-206", float64(rep.MemoryPeak)/mib)
	}
	rep, code := box(t, []string{"--mem", "64M"}, "touch", "200")
	expectStatus(t, rep, isolate.StatusML)
	if !rep.OOMKilled || code != 1 {
		t.Errorf("oom_killed %v exit %d, want true and 1", rep.OOMKilled, code)
	}
	rep, _ = runBox(t, "--", "/bin/true")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.MemoryPeak <= 0 || rep.MemoryPeak >= 2*mib {
		t.Errorf("/bin/true memory_peak %d, want (0, 2 MiB)", rep.MemoryPeak)
	}
}

func TestPidsLimit(t *testing.T) {
	needRoot(t)
	rep, _ := box(t, []string{"--pids", "10"}, "forkbomb")
	expectStatus(t, rep, isolate.StatusOK)
	n, _ := strconv.Atoi(strings.TrimSpace(rep.Stdout))
	if n != 9 {
		t.Errorf("forked %d children under --pids 10, want 9", n)
	}
	if rep.PidsPeak != 10 {
		t.Errorf("pids_peak %d, want 10", rep.PidsPeak)
	}
	rep, _ = runBox(t, "--", "/bin/true")
	if rep.PidsPeak != 1 {
		t.Errorf("/bin/true pids_peak %d, want 1", rep.PidsPeak)
	}
}

func TestFileRlimits(t *testing.T) {
	needRoot(t)
	rep, _ := box(t, []string{"--fsize", "1M"}, "write", "/box/big", "2048")
	expectStatus(t, rep, isolate.StatusSG)
	if rep.Signal != int(syscall.SIGXFSZ) {
		t.Errorf("writing past --fsize: signal %d, want SIGXFSZ", rep.Signal)
	}
	rep, _ = box(t, []string{"--open-files", "20", "--stack", "4M", "--fsize", "2M"}, "rlimit")
	expectStatus(t, rep, isolate.StatusOK)
	want := fmt.Sprintf("stack %d\nfsize %d\nnofile 20\n", 4<<20, 2<<20)
	if rep.Stdout != want {
		t.Errorf("rlimits seen inside:\n%s\nwant:\n%s", rep.Stdout, want)
	}
	rep, _ = box(t, []string{"--open-files", "20"}, "nofile")
	if strings.TrimSpace(rep.Stdout) != "20" {
		t.Errorf("opened %s files under --open-files 20", rep.Stdout)
	}
	// /box is a tmpfs of --tmp-size.
	rep, _ = box(t, []string{"--tmp-size", "1M", "--fsize", "0"}, "write", "/box/big", "2048")
	expectStatus(t, rep, isolate.StatusRE)
	if !strings.Contains(rep.Stderr, "No space left") {
		t.Errorf("filling a 1M /box: stderr %q, want ENOSPC", rep.Stderr)
	}
}

func TestOutputCaptureAndFiles(t *testing.T) {
	needRoot(t)
	rep, _ := box(t, []string{"--output-limit", "1000"}, "print", "100000")
	expectStatus(t, rep, isolate.StatusOK)
	if len(rep.Stdout) != 1000 || !rep.StdoutTruncated || rep.StderrTruncated {
		t.Errorf("kept %d bytes, truncated %v: want 1000 and true", len(rep.Stdout), rep.StdoutTruncated)
	}
	dir := shareDir(t)
	in := filepath.Join(dir, "in")
	os.WriteFile(in, []byte("3 4\n"), 0o644)
	out, errf := filepath.Join(dir, "out"), filepath.Join(dir, "err")
	rep, _ = runBox(t, "--stdin", in, "--stdout", out, "--stderr", errf, "--", "/bin/sh", "-c", "read a b; echo $((a+b)); echo oops >&2")
	expectStatus(t, rep, isolate.StatusOK)
	if got, _ := os.ReadFile(out); string(got) != "7\n" {
		t.Errorf("stdout file %q, want 7", got)
	}
	if got, _ := os.ReadFile(errf); string(got) != "oops\n" {
		t.Errorf("stderr file %q", got)
	}
	if rep.Stdout != "" {
		t.Errorf("stdout captured %q although it went to a file", rep.Stdout)
	}
	res := isolateCmd(t, "", "run", "--stream", "--", "/bin/echo", "live")
	if res.Stdout != "live\n" || res.Code != 0 {
		t.Errorf("--stream: stdout %q exit %d", res.Stdout, res.Code)
	}
	// Without --json: the program's output passes through, the summary
	// is one line on stderr.
	res = isolateCmd(t, "", "run", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3")
	if res.Stdout != "out\n" || !strings.HasPrefix(res.Stderr, "err\nisolate: RE") || res.Code != 1 {
		t.Errorf("plain run: stdout %q stderr %q exit %d", res.Stdout, res.Stderr, res.Code)
	}
}

func TestReportAndMetaFiles(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	rf, mf := filepath.Join(dir, "r.json"), filepath.Join(dir, "meta")
	res := isolateCmd(t, "", "run", "--report", rf, "--meta", mf, "--", "/bin/sh", "-c", "exit 2")
	if res.Code != 1 {
		t.Fatalf("exit %d", res.Code)
	}
	var rep isolate.Report
	data, _ := os.ReadFile(rf)
	if err := json.Unmarshal(data, &rep); err != nil || rep.Status != isolate.StatusRE || rep.ExitCode != 2 {
		t.Errorf("report file: %v %s", err, data)
	}
	meta, _ := os.ReadFile(mf)
	for _, line := range []string{"exitcode:2", "status:RE", "time:", "time-wall:", "max-rss:", "cg-mem:"} {
		if !strings.Contains(string(meta), line) {
			t.Errorf("meta file lacks %q:\n%s", line, meta)
		}
	}
}

func TestEnvironment(t *testing.T) {
	needRoot(t)
	t.Setenv("TEST_SECRET", "leak")
	t.Setenv("PASSME", "yes")
	rep, _ := runBox(t, "-E", "FOO=bar", "-E", "PASSME", "--", "/usr/bin/env")
	expectStatus(t, rep, isolate.StatusOK)
	got := strings.Split(strings.TrimSpace(rep.Stdout), "\n")
	want := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/box", "LANG=C.UTF-8", "FOO=bar", "PASSME=yes"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("environment inside:\n%s\nwant exactly:\n%s", rep.Stdout, strings.Join(want, "\n"))
	}
}

func TestInsideTheBox(t *testing.T) {
	needRoot(t)
	rep, _ := runBox(t, "--", "/bin/sh", "-c", `id -u; id -g; hostname; pwd; ls /; cat /etc/passwd | grep -c box; test -e /sys && echo has-sys; grep -E '^(NoNewPrivs|CapEff|CapBnd):' /proc/self/status`)
	expectStatus(t, rep, isolate.StatusOK)
	for _, want := range []string{"1000\n1000\nisolate\n/box\n", "NoNewPrivs:\t1", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000"} {
		if !strings.Contains(rep.Stdout, want) {
			t.Errorf("inside the box: output lacks %q:\n%s", want, rep.Stdout)
		}
	}
	if strings.Contains(rep.Stdout, "has-sys") {
		t.Error("/sys is visible in the box")
	}
	// Only its own processes; not PID 1.
	rep, _ = box(t, nil, "pids")
	f := strings.Fields(rep.Stdout)
	if len(f) != 2 || f[0] != "1" || f[1] == "1" {
		t.Errorf("visible processes / own pid: %q, want only itself, not PID 1", rep.Stdout)
	}
	// No descriptors beyond 0, 1, 2, even when the caller has more open.
	cmd := exec.Command(isolateBin, append(append([]string{"run", "--json"}, probe(t)...), "--", "/t/probe", "fds")...)
	extra, _ := os.Open("/dev/null")
	defer extra.Close()
	cmd.ExtraFiles = []*os.File{extra, extra, extra}
	out, _ := cmd.Output()
	var r isolate.Report
	json.Unmarshal(out, &r)
	if strings.TrimSpace(r.Stdout) != "0 1 2" {
		t.Errorf("open descriptors inside: %q, want 0 1 2", r.Stdout)
	}
}

func TestEscapesAreRefused(t *testing.T) {
	needRoot(t)
	for _, mode := range []string{"mount", "ptrace", "unshare"} {
		rep, _ := box(t, []string{"--seccomp", "none"}, mode)
		if rep.Status != isolate.StatusRE {
			t.Errorf("%s without seccomp: status %s, want it refused (RE): %s", mode, rep.Status, rep.Stdout)
		}
		rep, _ = box(t, nil, mode)
		if rep.Status != isolate.StatusRE {
			t.Errorf("%s: status %s, want it refused (RE): %s", mode, rep.Status, rep.Stdout)
		}
	}
	rep, _ := runBox(t, "--", "/bin/sh", "-c", "cat /etc/shadow; ls /root; touch /usr/x; touch /etc/x; echo done")
	for _, bad := range []string{"root:", "No such file"} {
		_ = bad
	}
	if strings.Contains(rep.Stdout, "root:") {
		t.Error("host /etc/shadow readable in the box")
	}
	if !strings.Contains(rep.Stderr, "Read-only file system") {
		t.Errorf("writing /usr: %q, want EROFS", rep.Stderr)
	}
	// A host listener on loopback is out of reach (own network namespace).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	rep, _ = box(t, nil, "connect", port)
	if rep.Status != isolate.StatusRE || !strings.Contains(rep.Stdout, "refused") {
		t.Errorf("connect to a host listener: %s %q, want refused", rep.Status, rep.Stdout)
	}
	rep, _ = box(t, []string{"--net", "host"}, "connect", port)
	if rep.Status != isolate.StatusOK {
		t.Errorf("--net host: connect to host listener: %s %q", rep.Status, rep.Stdout)
	}
}

func TestBindCopyChdir(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	os.WriteFile(filepath.Join(dir, "data.txt"), []byte("hello\n"), 0o644)
	os.Mkdir(filepath.Join(dir, "tree"), 0o755)
	os.WriteFile(filepath.Join(dir, "tree", "a"), []byte("A"), 0o644)
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	rep, _ := runBox(t,
		"--bind", dir+":/data",
		"--copy-in", filepath.Join(dir, "data.txt")+":in.txt",
		"--copy-in", filepath.Join(dir, "tree")+":/box/tree",
		"--copy-out", "/box/result:"+filepath.Join(out, "result"),
		"--copy-out", "/box/escape:"+filepath.Join(out, "escape"),
		"--chdir", "/box/tree",
		"--", "/bin/sh", "-c", "pwd; cat /data/data.txt /box/in.txt a; touch /data/x || echo ro; cat /box/in.txt > /box/result; ln -s /etc/hosts /box/escape")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.Stdout != "/box/tree\nhello\nhello\nAro\n" {
		t.Errorf("output %q", rep.Stdout)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "result")); string(got) != "hello\n" {
		t.Errorf("copy-out result %q", got)
	}
	// The symlink resolves inside the box: the box's own /etc/hosts,
	// never the host's.
	got, _ := os.ReadFile(filepath.Join(out, "escape"))
	host, _ := os.ReadFile("/etc/hosts")
	if string(got) == string(host) && len(host) > 0 && !strings.Contains(string(got), "isolate") {
		t.Errorf("copy-out followed a symlink out of the box")
	}
	rep, _ = runBox(t, "--bind", dir+":/data:rw", "--", "/bin/sh", "-c", "echo hi > /data/w 2>&1; echo rc=$?")
	if !strings.Contains(rep.Stdout, "rc=") {
		t.Errorf("rw bind: %q", rep.Stdout)
	}
}

func TestDetachedDaemonDiesWithRun(t *testing.T) {
	needRoot(t)
	rep, _ := box(t, []string{"--wall-time", "5", "--box-id", "919"}, "daemon")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.WallTime > 2 {
		t.Errorf("the run waited for its daemon: wall %.2f", rep.WallTime)
	}
	if boxHasProcess(919) {
		t.Error("the daemon outlived its run")
	}
	for _, l := range findLeaks() {
		if strings.Contains(l, "box-919") {
			t.Errorf("after a daemon run: %s", l)
		}
	}
}

func TestSupervisorKilledTakesBoxDown(t *testing.T) {
	needRoot(t)
	cmd := exec.Command(isolateBin, append(append([]string{"run", "--box-id", "917"}, probe(t)...), "--", "/t/probe", "sleep", "100")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the program runs in box 917's cgroup.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !boxHasProcess(917) {
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline = time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && boxHasProcess(917) {
		time.Sleep(10 * time.Millisecond)
	}
	if boxHasProcess(917) {
		t.Fatal("the program outlived its supervisor")
	}
	// Its cgroup is left; the next run removes it.
	rep, _ := runBox(t, "--", "/bin/true")
	expectStatus(t, rep, isolate.StatusOK)
	for _, l := range findLeaks() {
		if strings.Contains(l, "box-917") {
			t.Errorf("leftover of the killed supervisor not removed: %s", l)
		}
	}
}

// boxHasProcess tells whether a process of box id runs (by its host uid).
func boxHasProcess(id int) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/status")
	for _, p := range procs {
		data, _ := os.ReadFile(p)
		if strings.Contains(string(data), fmt.Sprintf("Uid:\t%d\t", isolate.FirstUID+id)) {
			return true
		}
	}
	return false
}

func TestParallelRunsUseDistinctBoxes(t *testing.T) {
	needRoot(t)
	var wg sync.WaitGroup
	ids := make([]int, 4)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rep, _ := box(t, nil, "sleep", "1")
			ids[i] = rep.BoxID
			if rep.Status != isolate.StatusOK {
				t.Errorf("parallel run %d: %s %s", i, rep.Status, rep.Message)
			}
		}(i)
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("two parallel runs shared box %d: %v", id, ids)
		}
		seen[id] = true
	}
	// An explicit box in use is refused.
	cmd := exec.Command(isolateBin, append(append([]string{"run", "--box-id", "918"}, probe(t)...), "--", "/t/probe", "sleep", "2")...)
	cmd.Start()
	defer cmd.Wait()
	time.Sleep(300 * time.Millisecond)
	rep, code := runBox(t, "--box-id", "918", "--", "/bin/true")
	if rep.Status != isolate.StatusXX || code != 2 || !strings.Contains(rep.Message, "in use") {
		t.Errorf("box in use: %s %q exit %d", rep.Status, rep.Message, code)
	}
}

func TestBadInput(t *testing.T) {
	needRoot(t)
	before := findLeaks()
	cases := [][]string{
		{"run", "--mem", "12Q", "--", "/bin/true"},
		{"run", "--time", "fast", "--", "/bin/true"},
		{"run", "--wall-time", "-1", "--", "/bin/true"},
		{"run", "--pids", "x", "--", "/bin/true"},
		{"run", "--cpus", "two", "--", "/bin/true"},
		{"run", "--no-such-flag", "--", "/bin/true"},
		{"run", "--stdin", "/no/such/file", "--", "/bin/true"},
		{"run", "--bind", "/no/such/dir:/x", "--", "/bin/true"},
		{"run", "--bind", "nocolon", "--", "/bin/true"},
		{"run", "--copy-in", "/no/such:/box/x", "--", "/bin/true"},
		{"run", "--image", "nosuchimage", "--", "/bin/true"},
		{"run", "--net", "bridge", "--", "/bin/true"},
		{"run", "--seccomp", "/no/such/profile.json", "--", "/bin/true"},
		{"run", "--chdir", "relative", "--", "/bin/true"},
		{"run", "--box-id", "5000", "--", "/bin/true"},
		{"run"},
		{"nosuchcommand"},
	}
	for _, args := range cases {
		res := isolateCmd(t, "", args...)
		lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
		if res.Code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "isolate: ") || res.Stdout != "" {
			t.Errorf("%v: exit %d stdout %q stderr %q; want exit 2 and one line", args, res.Code, res.Stdout, res.Stderr)
		}
	}
	// A field the runtime checks is named as the option the user gave.
	for _, args := range [][]string{
		{"run", "--bind", "/no/such/dir:/x", "--", "/bin/true"},
		{"run", "--copy-in", "/no/such:/box/x", "--", "/bin/true"},
		{"run", "--image", "nosuchimage", "--", "/bin/true"},
		{"run", "--seccomp", "/no/such/profile.json", "--", "/bin/true"},
		{"run", "--box-id", "5000", "--", "/bin/true"},
	} {
		if res := isolateCmd(t, "", args...); !strings.HasPrefix(res.Stderr, "isolate: "+args[1]+" ") {
			t.Errorf("%v: stderr %q, want it to name %s", args, res.Stderr, args[1])
		}
	}
	if after := findLeaks(); len(after) > len(before) {
		t.Errorf("bad input left %v", after)
	}
	// Not root: one line, exit 2.
	cmd := exec.Command(isolateBin, "run", "--", "/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "root") {
		t.Errorf("as nobody: %v %q", err, out)
	}
}

// Malformed numbers are usage errors: before package api's parsers, each
// of these ran with a garbage limit (NaN became a negative or huge value,
// "0.5x" and "inf" CPUs were read, an empty --time meant none).
func TestMalformedNumbersAreUsageErrors(t *testing.T) {
	needRoot(t)
	before := findLeaks()
	cases := [][]string{
		{"--mem", "NaN"}, {"--output-limit", "NaN"}, {"--fsize", "NaN"}, {"--tmp-size", "NaN"}, {"--stack", "nan"},
		{"--time", "NaN"}, {"--wall-time", "NaN"}, {"--extra-time", "NaN"}, {"--cpus", "inf"}, {"--cpus", "0.5x"},
		{"--cpus", "NaN"}, {"--time", ""}, {"--mem", "1e3"}, {"--pids", "99999999999"}, {"--mem", "99999999999G"},
		{"--mem", "4611686018427387905"},
	}
	// More open files than the hard limit the box inherits (the test's,
	// which its service shares) cannot be set: a usage error before
	// anything is built, not XX after.
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err == nil && nofile.Max < 1<<40 {
		cases = append(cases, []string{"--open-files", strconv.FormatUint(nofile.Max+1, 10)})
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	for _, c := range cases {
		args := append(append([]string{"run", "-o", out}, c...), "--", "/bin/true")
		res := isolateCmd(t, "", args...)
		lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
		if res.Code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "isolate: --") || res.Stdout != "" {
			t.Errorf("%v: exit %d stdout %q stderr %q; want exit 2 and one line naming the option", c, res.Code, res.Stdout, res.Stderr)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%v: created the output file", c)
			os.Remove(out)
		}
	}
	if after := findLeaks(); len(after) > len(before) {
		t.Errorf("malformed numbers left %v", after)
	}
}

func TestCheckAndVersion(t *testing.T) {
	needRoot(t)
	res := isolateCmd(t, "", "check")
	if res.Code != 0 || !strings.Contains(res.Stdout, "cgroups") {
		t.Errorf("check: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	res = isolateCmd(t, "", "version")
	if res.Code != 0 || !strings.HasPrefix(res.Stdout, "isolate ") {
		t.Errorf("version: %q", res.Stdout)
	}
}

func TestNativeRunOnPersistentBox(t *testing.T) {
	needRoot(t)
	testBoxRoot(t, shareDir(t))
	res := isolateCmd(t, "", "init", "--box-id", "921")
	if res.Code != 0 {
		t.Fatalf("init: exit %d %s", res.Code, res.Stderr)
	}
	defer isolateCmd(t, "", "cleanup", "--box-id", "921")
	dir := strings.TrimSpace(res.Stdout)
	if res := isolateCmd(t, "", "check"); !strings.Contains(res.Stdout, "persistent boxes") || !strings.Contains(res.Stdout, "921") {
		t.Errorf("check does not list persistent box 921:\n%s", res.Stdout)
	}
	os.WriteFile(filepath.Join(dir, "box", "in.txt"), []byte("kept\n"), 0o644)
	rep, _ := runBox(t, "--box-id", "921", "--", "/bin/sh", "-c", "cat in.txt; echo made > out.txt")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.Stdout != "kept\n" {
		t.Errorf("the persistent box's file inside: %q", rep.Stdout)
	}
	rep, _ = runBox(t, "--box-id", "921", "--", "/bin/cat", "out.txt")
	if rep.Stdout != "made\n" {
		t.Errorf("/box did not persist across runs: %q", rep.Stdout)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "box", "out.txt")); err != nil || string(got) != "made\n" {
		t.Errorf("the caller reads the result: %q %v", got, err)
	}
}

func TestCopyOutDirectoryAndErrors(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	out := filepath.Join(dir, "out")
	rep, code := runBox(t,
		"--copy-out", "/box/missing:"+filepath.Join(dir, "missing"),
		"--copy-out", "/box/d:"+out,
		"--", "/bin/sh", "-c", "mkdir -p d/sub; echo A > d/a; echo B > d/sub/b; ln -s /etc/passwd d/link")
	// A copy-out that fails is the run's failure (XX, exit 2); the others
	// are still made.
	expectStatus(t, rep, isolate.StatusXX)
	if code != 2 {
		t.Errorf("a failed copy-out exits %d, want 2", code)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "a")); string(got) != "A\n" {
		t.Errorf("copied-out d/a: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "sub", "b")); string(got) != "B\n" {
		t.Errorf("copied-out d/sub/b: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(out, "link")); !os.IsNotExist(err) {
		t.Errorf("a symlink inside a copied-out directory was followed or copied: %v", err)
	}
	if !strings.Contains(rep.Message, "--copy-out /box/missing") {
		t.Errorf("a missing copy-out is not reported: message %q", rep.Message)
	}
}

func TestConfigurationFile(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	cfg := filepath.Join(dir, "config")
	t.Setenv("ISOLATE_CONFIG", cfg)
	os.WriteFile(cfg, []byte("# judge host\nnum_boxes = 2000\nbox_root = "+dir+"\nfirst_uid = 60000\nlock_root = /run/isolate/locks\n"), 0o644)
	rep, code := runBox(t, "--box-id", "1922", "--", "/bin/true")
	if rep.Status != isolate.StatusOK || rep.BoxID != 1922 || code != 0 {
		t.Errorf("box 1922 under num_boxes 2000: %s %q box %d", rep.Status, rep.Message, rep.BoxID)
	}
	os.WriteFile(cfg, []byte("num_boxes = 10\n"), 0o644)
	if res := isolateCmd(t, "", "run", "--box-id", "12", "--", "/bin/true"); res.Code != 2 || !strings.Contains(res.Stderr, "out of range") {
		t.Errorf("box 12 under num_boxes 10: exit %d %q", res.Code, res.Stderr)
	}
	for _, bad := range []string{"nonsense = 1\n", "num_boxes = 0\n", "box_root = relative\n", "first_uid = 1000\n", "box3.cpus = 1\n"} {
		os.WriteFile(cfg, []byte(bad), 0o644)
		res := isolateCmd(t, "", "run", "--", "/bin/true")
		if lines := strings.Split(strings.TrimSpace(res.Stderr), "\n"); res.Code != 2 || len(lines) != 1 || !strings.Contains(res.Stderr, "config") {
			t.Errorf("config %q: exit %d stderr %q, want one line naming the file", bad, res.Code, res.Stderr)
		}
	}
}

// A failure inside the sandbox machinery is XX, exit 2, with the step that
// failed and its errno, and leaves nothing behind.
func TestSetupFailureIsXXWithTheStep(t *testing.T) {
	needRoot(t)
	rep, code := runBox(t, "--box-id", "923", "--bind", "/etc/hostname:/proc/sys/isolate-test", "--", "/bin/true")
	if rep.Status != isolate.StatusXX || code != 2 {
		t.Fatalf("status %s exit %d, want XX and 2", rep.Status, code)
	}
	if !strings.Contains(rep.Message, "/proc/sys/isolate-test") || !strings.Contains(rep.Message, "errno") {
		t.Errorf("message %q does not name the step and errno", rep.Message)
	}
	for _, l := range findLeaks() {
		if strings.Contains(l, "box-923") || strings.Contains(l, "uid 60923") {
			t.Errorf("after a setup failure: %s", l)
		}
	}
}

// Nothing of isolate stays in the cgroup tree after a run, however it
// ended: not the box's cgroup, not the "isolate" directory above it.
func TestNoCgroupLeftAfterRuns(t *testing.T) {
	needRoot(t)
	if viaService {
		// Its pool's boxes (built ahead, waiting) live in cgroups under
		// the same parent while it runs; isolate/pool_test.go checks that
		// StopPool leaves none.
		t.Skip("through a service: it keeps boxes built ahead, so the cgroup parent stays while it runs")
	}
	runs := []struct {
		name   string
		status isolate.Status
		args   []string
	}{
		{"ok", isolate.StatusOK, []string{"--", "/bin/true"}},
		{"wall limit", isolate.StatusTO, []string{"--wall-time", "0.2", "--", "/bin/sleep", "5"}},
		{"setup failure", isolate.StatusXX, []string{"--bind", "/etc/hostname:/proc/sys/isolate-test", "--", "/bin/true"}},
	}
	for _, r := range runs {
		rep, _ := runBox(t, r.args...)
		if rep.Status != r.status {
			t.Errorf("%s: status %s, want %s", r.name, rep.Status, r.status)
		}
		if left := cgroupParentsLeft(); len(left) > 0 {
			t.Errorf("after a run (%s): %v", r.name, left)
		}
	}
}

func TestCopyInErrorsAndSymlinks(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	os.Mkdir(filepath.Join(dir, "tree"), 0o755)
	os.WriteFile(filepath.Join(dir, "tree", "f"), []byte("F"), 0o644)
	os.Symlink("/etc/shadow", filepath.Join(dir, "tree", "shadow"))
	rep, _ := runBox(t, "--copy-in", filepath.Join(dir, "tree")+":/box/t", "--", "/bin/sh", "-c", "cat t/f; test -e t/shadow && echo LINKED; true")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.Stdout != "F" {
		t.Errorf("copy-in of a tree with a host symlink: %q (the symlink must not be copied)", rep.Stdout)
	}
	// Missing directories are made, as the box user's, as `mkdir -p` does.
	rep, _ = runBox(t, "--copy-in", filepath.Join(dir, "tree", "f")+":/box/new/sub/f", "--", "/bin/sh", "-c", "cat new/sub/f; stat -c ' %u' new new/sub; id -u")
	expectStatus(t, rep, isolate.StatusOK)
	// "F", the owners of new and new/sub, the program's uid.
	if f := strings.Fields(rep.Stdout); len(f) != 4 || f[0] != "F" || f[1] != f[3] || f[2] != f[3] {
		t.Errorf("copy-in into missing directories: %q, want the file and both directories owned by the program's uid", rep.Stdout)
	}
	// A parent that is a file cannot be made a directory.
	rep, code := runBox(t, "--copy-in", filepath.Join(dir, "tree", "f")+":/box/x", "--copy-in", filepath.Join(dir, "tree", "f")+":/box/x/f", "--", "/bin/true")
	if rep.Status != isolate.StatusXX || code != 2 || !strings.Contains(rep.Message, "--copy-in") {
		t.Errorf("copy-in below a file: %s %q exit %d", rep.Status, rep.Message, code)
	}
}

// A step of the sandbox's own before the program's execve (here its
// working directory) is a sandbox failure, XX with the step; a program
// that is not there stays RE 127 (TestExitStatuses).
func TestStartStepFailureIsXX(t *testing.T) {
	needRoot(t)
	rep, code := runBox(t, "--chdir", "/nonexistent", "--", "/bin/true")
	expectStatus(t, rep, isolate.StatusXX)
	if code != 2 || !strings.Contains(rep.Message, "working directory") {
		t.Errorf("--chdir /nonexistent: exit %d, message %q; want 2 and the step named", code, rep.Message)
	}
}

// The user/system split counts every process of the program: here an
// orphan that burns user time while the main process, all system time,
// waits for it. Counting the main process alone gives almost no user time.
func TestUserTimeCountsEveryProcess(t *testing.T) {
	needRoot(t)
	script := `(sh -c 'i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; : > /box/done' &)
while [ ! -e /box/done ]; do dd if=/dev/zero of=/dev/null bs=1M count=200 2>/dev/null; done`
	rep, _ := runBox(t, "-t", "20", "--", "/bin/sh", "-c", script)
	expectStatus(t, rep, isolate.StatusOK)
	// The orphan alone, for scale: its loop is all user time.
	alone, _ := runBox(t, "-t", "20", "--", "/bin/sh", "-c", `i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done`)
	expectStatus(t, alone, isolate.StatusOK)
	if rep.UserTime < alone.UserTime/2 {
		t.Errorf("user_time %.3f s (cpu %.3f s), want at least half the orphan's own %.3f s", rep.UserTime, rep.CPUTime, alone.UserTime)
	}
}

// 70 000 arguments reach the program (the plan carries them whole; the
// kernel's own limit on an execve is far above), never a broken pipe.
func TestManyArguments(t *testing.T) {
	needRoot(t)
	args := []string{"--", "/bin/sh", "-c", `echo $#`, "sh"}
	for i := 0; i < 70000; i++ {
		args = append(args, "a")
	}
	rep, _ := runBox(t, args...)
	expectStatus(t, rep, isolate.StatusOK)
	if rep.Stdout != "70000\n" {
		t.Errorf("the program saw %q arguments, want 70000", rep.Stdout)
	}
}

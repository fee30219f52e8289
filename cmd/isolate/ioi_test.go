package main

// The ioi/isolate form's options, one by one, against the real kernel.
// Box ids 320-349.

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

	"github.com/isolate-sandbox/isolate/isolate"
)

// ioiBoxRoot gives this test a box root (testBoxRoot) and returns it; as
// a normal user it skips the test, which drives isolate as root.
func ioiBoxRoot(t *testing.T) string {
	t.Helper()
	needRoot(t)
	return testBoxRoot(t, filepath.Join(t.TempDir(), "boxes"))
}

// ioiBox initializes box id for the test and cleans it up after.
func ioiBox(t *testing.T, id int) string {
	t.Helper()
	res := isolateCmd(t, "", "-b", strconv.Itoa(id), "--init")
	if res.Code != 0 {
		t.Fatalf("--init: exit %d: %s", res.Code, res.Stderr)
	}
	t.Cleanup(func() { isolateCmd(t, "", "-b", strconv.Itoa(id), "--cleanup") })
	return strings.TrimSpace(res.Stdout)
}

// ioiMeta runs the ioi form with -M - and returns the meta keys, the
// program's output (which precedes the meta file on stdout) and the exit
// status.
func ioiMeta(t *testing.T, args ...string) (map[string]string, result) {
	t.Helper()
	res := isolateCmd(t, "", append([]string{"-M", "-"}, args...)...)
	m := map[string]string{}
	lines := strings.Split(strings.TrimRight(res.Stdout, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		k, v, ok := strings.Cut(lines[i], ":")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			break
		}
		m[k] = v
		res.Stdout = strings.Join(lines[:i], "\n")
	}
	return m, res
}

// ioiProbe is the directory holding the probe program (see probe).
func ioiProbe(t *testing.T) string {
	probe(t)
	return probeDir
}

func TestIOIUsageErrors(t *testing.T) {
	needRoot(t)
	root := ioiBoxRoot(t)
	// Through the service the root is the machine's, which exists.
	entries := func() string {
		names, _ := filepath.Glob(filepath.Join(root, "*"))
		return strings.Join(names, " ")
	}
	before := entries()
	for _, args := range [][]string{
		{"--run"},
		{"-b", "320", "--run"},
		{"--init", "--run"},
		{"-b", "320", "--init", "extra"},
		{"-t", "abc", "--run", "--", "/bin/true"},
		{"--frobnicate", "--run", "--", "/bin/true"},
		{"--std=x", "--run", "--", "/bin/true"},
		{"-d", "/x:bogus", "--run", "--", "/bin/true"},
		{"-d", "/x=relative", "--run", "--", "/bin/true"},
		{"-d", "/x/../../etc=/etc", "--run", "--", "/bin/true"},
		{"-E", "=x", "--run", "--", "/bin/true"},
		{"-b", "-1", "--init"},
		{"-b", "5000", "--init"},
		{"--processes=x", "--run", "--", "/bin/true"},
		{"--cg-mem", "--init"},
		{"--as-uid=5", "--init"},
	} {
		res := isolateCmd(t, "", args...)
		lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
		if res.Code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "isolate: ") {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and one isolate: line", args, res.Code, res.Stderr)
		}
	}
	if _, err := os.Stat(root); !viaService && !os.IsNotExist(err) || entries() != before {
		t.Errorf("bad command lines created %s or boxes in it", root)
	}
}

func TestIOIVersionAndCgroupRoot(t *testing.T) {
	needRoot(t)
	ioiBoxRoot(t)
	res := isolateCmd(t, "", "--version")
	if res.Code != 0 || !strings.HasPrefix(res.Stdout, "The process isolator ") {
		t.Errorf("--version: exit %d %q", res.Code, res.Stdout)
	}
	res = isolateCmd(t, "", "--print-cg-root")
	if res.Code != 0 || !strings.HasPrefix(res.Stdout, "/sys/fs/cgroup") {
		t.Errorf("--print-cg-root: exit %d %q %q", res.Code, res.Stdout, res.Stderr)
	}
}

func TestIOIStatusesAndMeta(t *testing.T) {
	needRoot(t)
	ioiBoxRoot(t)
	ioiBox(t, 321)
	pd := ioiProbe(t)
	run := func(extra ...string) (map[string]string, result) {
		return ioiMeta(t, append([]string{"-b", "321", "-d", "/t=" + pd}, extra...)...)
	}
	m, res := run("--run", "--", "/t/probe", "exit", "0")
	if res.Code != 0 || m["exitcode"] != "0" || m["status"] != "" || m["message"] != "" || m["killed"] != "" {
		t.Errorf("success: exit %d meta %v (no status or message on success)", res.Code, m)
	}
	if !strings.HasPrefix(res.Stderr, "OK (") || !strings.Contains(res.Stderr, " sec real, ") {
		t.Errorf("status line %q", res.Stderr)
	}
	m, res = run("-s", "--run", "--", "/t/probe", "exit", "7")
	if res.Code != 1 || m["status"] != "RE" || m["exitcode"] != "7" || m["message"] != "Exited with error status 7" || res.Stderr != "" {
		t.Errorf("RE: exit %d meta %v stderr %q", res.Code, m, res.Stderr)
	}
	m, res = run("--run", "--", "/t/probe", "abort")
	if res.Code != 1 || m["status"] != "SG" || m["exitsig"] != "6" || m["exitcode"] != "" {
		t.Errorf("SG: exit %d meta %v", res.Code, m)
	}
	m, res = run("-t", "0.3", "--run", "--", "/t/probe", "forever")
	if res.Code != 1 || m["status"] != "TO" || m["killed"] != "1" || strings.Contains(m["message"], "wall") || m["exitcode"] != "" {
		t.Errorf("CPU TO: exit %d meta %v", res.Code, m)
	}
	m, res = run("-w", "0.3", "--run", "--", "/t/probe", "sleep", "10")
	if res.Code != 1 || m["status"] != "TO" || m["killed"] != "1" || !strings.Contains(m["message"], "wall") {
		t.Errorf("wall TO: exit %d meta %v", res.Code, m)
	}
	// -x (TestIOIExtraTime has the rest): killed once the CPU time
	// exceeds -x when -x is the larger, still a time-out.
	m, res = run("-t", "0.2", "-x", "0.5", "--run", "--", "/t/probe", "forever")
	if tm, _ := strconv.ParseFloat(m["time"], 64); res.Code != 1 || m["status"] != "TO" || tm < 0.5 {
		t.Errorf("-t 0.2 -x 0.5: exit %d meta %v, want TO after 0.5 s of CPU", res.Code, m)
	}
	m, res = run("--cg-mem=32768", "--run", "--", "/t/probe", "touch", "256")
	if res.Code != 1 || m["status"] != "SG" || m["exitsig"] != "9" || m["cg-oom-killed"] != "1" {
		t.Errorf("OOM: exit %d meta %v", res.Code, m)
	}
	m, res = run("--run", "--", "nope")
	if res.Code != 1 || m["status"] != "RE" || m["exitcode"] != "127" || !strings.Contains(res.Stderr, `execve("nope"): No such file or directory`) {
		t.Errorf("cannot execute: exit %d meta %v stderr %q", res.Code, m, res.Stderr)
	}
	// An uninitialized box is a sandbox error.
	m, res = ioiMeta(t, "-b", "322", "--run", "--", "/bin/true")
	if res.Code != 2 || m["status"] != "XX" || !strings.Contains(m["message"], "--init") {
		t.Errorf("uninitialized box: exit %d meta %v", res.Code, m)
	}
}

// TestIOIExtraTime: ioi/isolate kills at max(-t, -x) of CPU time
// (check_timeout in isolate.c), where the native --extra-time kills at
// time+extra. -t 1 -x 0.5 must stop near 1.0 s of CPU: the bound 1.4 s
// is 0.1 s under where time+extra (1.5 s) would stop it, and 0.4 s over
// the limit, far more than the supervisor's kill latency (it wakes when
// the budget can first run out and settles the cgroup's counter first)
// even on a loaded machine. The figures are the kernel's CPU accounting,
// not a wall clock.
func TestIOIExtraTime(t *testing.T) {
	ioiBoxRoot(t)
	ioiBox(t, 335)
	pd := ioiProbe(t)
	m, res := ioiMeta(t, "-b", "335", "-d", "/t="+pd, "-t", "1", "-x", "0.5", "--run", "--", "/t/probe", "forever")
	tm, err := strconv.ParseFloat(m["time"], 64)
	if err != nil || res.Code != 1 || m["status"] != "TO" || m["killed"] != "1" {
		t.Fatalf("-t 1 -x 0.5: exit %d meta %v, want a TO kill", res.Code, m)
	}
	if tm < 1.0 || tm >= 1.4 {
		t.Errorf("-t 1 -x 0.5: killed after %.3f s of CPU, want at 1.0 s (before 1.4 s; time+extra would be 1.5 s)", tm)
	}
}

func TestIOIEnvironmentRules(t *testing.T) {
	needRoot(t)
	ioiBoxRoot(t)
	ioiBox(t, 323)
	t.Setenv("IOI_PASS", "passed")
	t.Setenv("IOI_SECRET", "leak")
	_, res := ioiMeta(t, "-b", "323", "-E", "IOI_PASS", "-E", "SET=1", "-E", "GONE=x", "-E", "GONE=", "-E", "UNSET_VAR", "--run", "--", "/usr/bin/env")
	got := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	want := []string{"LIBC_FATAL_STDERR_=1", "IOI_PASS=passed", "SET=1"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("environment %q, want exactly %q", got, want)
	}
	_, res = ioiMeta(t, "-b", "323", "-e", "-E", "IOI_SECRET=", "--run", "--", "/usr/bin/env")
	if !strings.Contains(res.Stdout, "IOI_PASS=passed") || strings.Contains(res.Stdout, "IOI_SECRET") {
		t.Errorf("-e then -E VAR=: %q", res.Stdout)
	}
}

func TestIOIDirectoryRules(t *testing.T) {
	needRoot(t)
	ioiBoxRoot(t)
	dir := ioiBox(t, 324)
	pd := ioiProbe(t)
	host := shareDir(t)
	os.WriteFile(filepath.Join(host, "data"), []byte("hello\n"), 0o644)
	os.Chmod(host, 0o777)
	sh := func(script string, opts ...string) (map[string]string, result) {
		return ioiMeta(t, append(append([]string{"-b", "324", "-p10"}, opts...), "--run", "--", "/bin/sh", "-c", script)...)
	}
	if _, res := sh("cat /data/data && ! touch /data/new", "-d", "/data="+host); res.Code != 0 {
		t.Errorf("read-only rule: %d %q %q", res.Code, res.Stdout, res.Stderr)
	}
	if _, res := sh("touch /data/new", "-d", "/data="+host+":rw"); res.Code != 0 {
		t.Errorf("rw rule: %d %q", res.Code, res.Stderr)
	}
	if m, res := ioiMeta(t, "-b", "324", "-d", "/t="+pd+":noexec", "--run", "--", "/t/probe", "exit", "0"); res.Code != 1 || m["exitcode"] != "127" {
		t.Errorf("noexec rule: exit %d %v", res.Code, m)
	}
	if _, res := sh("! test -e /nothere", "-d", "/nothere=/does/not/exist:maybe"); res.Code != 0 {
		t.Errorf("maybe rule: %d %q", res.Code, res.Stderr)
	}
	if m, res := sh("true", "-d", "/x=/does/not/exist"); res.Code != 2 || m["status"] != "XX" {
		t.Errorf("missing directory: exit %d %v", res.Code, m)
	}
	if _, res := sh("grep -q ' /scratch tmpfs ' /proc/mounts && touch /scratch/x", "-d", "/scratch=tmpfs:fs:rw"); res.Code != 0 {
		t.Errorf("fs rule: %d %q", res.Code, res.Stderr)
	}
	// tmp rules are directories of the box, kept between runs like /box.
	if _, res := sh("echo kept > /tmp/f && echo w > /work/f", "-d", "/work:tmp"); res.Code != 0 {
		t.Errorf("tmp rules: %d %q", res.Code, res.Stderr)
	}
	if _, res := sh("cat /tmp/f /work/f", "-d", "/work:tmp"); res.Code != 0 || res.Stdout != "kept\nw" {
		t.Errorf("tmp rules after a run: %d %q %q", res.Code, res.Stdout, res.Stderr)
	}
	if fi, err := os.Stat(filepath.Join(dir, "tmp", "work")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("tmp rule directory: %v %v", fi, err)
	}
	// Deleting the box rule leaves a fresh /box; -c is relative to /box.
	if _, res := sh("echo $PWD; touch f", "-d", "box=", "-c", "sub", "-d", "/box/sub=tmpfs:fs:rw"); res.Code != 0 || res.Stdout != "/box/sub" {
		t.Errorf("-d box= -c sub: %d %q %q", res.Code, res.Stdout, res.Stderr)
	}
	// The host's /dev never enters: the default dev rule is our minimal one.
	if _, res := sh("ls /dev | tr '\\n' ' '"); strings.Contains(res.Stdout, "sda") || !strings.Contains(res.Stdout, "null") {
		t.Errorf("/dev: %q", res.Stdout)
	}
}

// threadsProgram starts argv[1] threads and says how many it could start.
const threadsProgram = `#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void *idle(void *a) { pause(); return a; }
int main(int argc, char **argv) {
	int n = atoi(argv[1]), ok = 0;
	pthread_t t;
	for (int i = 0; i < n; i++)
		if (pthread_create(&t, NULL, idle, NULL) == 0) ok++;
	printf("started %d\n", ok);
	return 0;
}
`

func TestIOILimits(t *testing.T) {
	needRoot(t)
	ioiBoxRoot(t)
	ioiBox(t, 325)
	pd := ioiProbe(t)
	probeRun := func(opts []string, args ...string) (map[string]string, result) {
		return ioiMeta(t, append(append(append([]string{"-b", "325", "-d", "/t=" + pd}, opts...), "--run", "--", "/t/probe"), args...)...)
	}
	// One process by default; -p N processes and threads (threads count,
	// as with ioi/isolate's control groups); -p alone no limit.
	dir := shareDir(t)
	compileC(t, dir, "threads", threadsProgram, "-static", "-pthread")
	threads := func(opts ...string) string {
		_, res := ioiMeta(t, append(append([]string{"-b", "325", "-d", "/d=" + dir}, opts...), "--run", "--", "/d/threads", "4")...)
		return res.Stdout
	}
	for _, c := range []struct {
		opts []string
		want string
	}{{nil, "started 0"}, {[]string{"-p3"}, "started 2"}, {[]string{"-p5"}, "started 4"}, {[]string{"-p"}, "started 4"}, {[]string{"-p0"}, "started 4"}} {
		if got := threads(c.opts...); got != c.want {
			t.Errorf("4 threads with %q: %q, want %q", c.opts, got, c.want)
		}
	}
	// -f: a bigger file dies of SIGXFSZ.
	if m, _ := probeRun([]string{"-f", "64"}, "write", "/box/big", "128"); m["exitsig"] != "25" {
		t.Errorf("-f 64 and a 128 KiB file: %v", m)
	}
	// -k unset: unlimited stack (up to the limit isolate itself has);
	// -k, -n and -m set the limits.
	_, res := ioiMeta(t, "-b", "325", "-p4", "--run", "--", "/bin/sh", "-c", "ulimit -s; ulimit -n")
	if lines := strings.Fields(res.Stdout); len(lines) != 2 || lines[1] != "64" {
		t.Errorf("default ulimit -s, -n: %q", res.Stdout)
	}
	_, res = ioiMeta(t, "-b", "325", "-p4", "-k", "1024", "-n", "20", "-m", "1048576", "--run", "--", "/bin/sh", "-c", "ulimit -s; ulimit -n; ulimit -v")
	if got := strings.Fields(res.Stdout); strings.Join(got, " ") != "1024 20 1048576" {
		t.Errorf("-k 1024 -n 20 -m 1048576: ulimit says %q", res.Stdout)
	}
	// -m limits each process's address space: a big allocation fails
	// inside the program instead of a kill.
	if m, _ := probeRun([]string{"-m", "65536"}, "touch", "256"); m["status"] == "" || m["cg-oom-killed"] != "" {
		t.Errorf("-m 65536 and 256 MiB: %v", m)
	}
	// --share-net shares the host's network namespace.
	links, _ := os.ReadDir("/sys/class/net")
	// (A last line that is not "name: value" ends the program's output:
	// an interface's line would read as a meta key.)
	netDev := []string{"/bin/sh", "-c", "while read -r l; do echo \"$l\"; done < /proc/net/dev; echo end"}
	_, shared := ioiMeta(t, append([]string{"-b", "325", "--share-net", "--run", "--"}, netDev...)...)
	_, own := ioiMeta(t, append([]string{"-b", "325", "--run", "--"}, netDev...)...)
	for _, l := range links {
		if !strings.Contains(shared.Stdout, l.Name()+":") {
			t.Errorf("--share-net: the box does not see %s:\n%s", l.Name(), shared.Stdout)
		}
		if l.Name() != "lo" && strings.Contains(own.Stdout, l.Name()+":") {
			t.Errorf("without --share-net the box sees %s", l.Name())
		}
	}
}

func TestIOIInheritedStreams(t *testing.T) {
	needRoot(t)
	ioiBoxRoot(t)
	ioiBox(t, 326)
	dir := shareDir(t)
	out, errf, log := filepath.Join(dir, "out"), filepath.Join(dir, "err"), filepath.Join(dir, "log")
	os.WriteFile(log, []byte("before\n"), 0o644)
	sh := func(redirect, script string) int {
		cmd := exec.Command("/bin/sh", "-c", isolateBin+` -s -b 326 -p4 --run -- /bin/sh -c '`+script+`' `+redirect)
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return 0
	}
	// Judge0's redirections: a file for each stream.
	if rc := sh("< "+log+" > "+out+" 2> "+errf, "cat; echo e >&2"); rc != 0 {
		t.Fatalf("exit %d", rc)
	}
	if o, _ := os.ReadFile(out); string(o) != "before\n" {
		t.Errorf("stdout %q", o)
	}
	if e, _ := os.ReadFile(errf); string(e) != "e\n" {
		t.Errorf("stderr %q", e)
	}
	// >> appends after what is there; 2>&1 shares one offset.
	if rc := sh(">> "+log+" 2>&1", "echo one; echo two >&2; echo three"); rc != 0 {
		t.Fatalf("exit %d", rc)
	}
	if l, _ := os.ReadFile(log); string(l) != "before\none\ntwo\nthree\n" {
		t.Errorf("appended log %q", l)
	}
	if rc := sh("> "+out+" 2>&1", "echo one; echo two >&2"); rc != 0 {
		t.Fatalf("exit %d", rc)
	}
	if o, _ := os.ReadFile(out); string(o) != "one\ntwo\n" {
		t.Errorf("2>&1 into a new file: %q", o)
	}
	// The status line follows the program's output in a shared file.
	cmd := exec.Command("/bin/sh", "-c", isolateBin+` -b 326 --run -- /bin/echo hi > `+out+` 2>&1`)
	cmd.Run()
	if o, _ := os.ReadFile(out); !strings.HasPrefix(string(o), "hi\nOK (") {
		t.Errorf("program output then status line: %q", o)
	}
}

// TestIOIStdinSocket: a standard input that is a socket (Node's
// child_process gives its children AF_UNIX socketpairs) is the program's
// standard input, and only descriptors 0, 1 and 2 reach the program.
func TestIOIStdinSocket(t *testing.T) {
	ioiBoxRoot(t)
	ioiBox(t, 336)
	pd := ioiProbe(t)
	for _, args := range [][]string{
		{"-b", "336", "--run", "--", "/bin/cat"},
		{"run", "-b", "336", "--stdin", "/dev/stdin", "--", "/bin/cat"},
	} {
		parent, child := socketpair(t)
		cmd := exec.Command(isolateBin, args...)
		cmd.Stdin = child
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		child.Close()
		parent.WriteString("through a socket\n")
		parent.Close()
		err := cmd.Wait()
		if err != nil || !strings.Contains(out.String(), "through a socket\n") {
			t.Errorf("%q with a socket as stdin: %v, stdout %q, stderr %q", args, err, out.String(), errb.String())
		}
	}
	parent, child := socketpair(t)
	defer parent.Close()
	cmd := exec.Command(isolateBin, "-b", "336", "-d", "/t="+pd, "--run", "--", "/t/probe", "fds")
	cmd.Stdin = child
	cmd.ExtraFiles = []*os.File{child, child} // isolate's own 3 and 4
	out, err := cmd.Output()
	child.Close()
	if err != nil || strings.TrimSpace(string(out)) != "0 1 2" {
		t.Errorf("descriptors of the program: %q (%v), want 0 1 2", out, err)
	}
}

// TestIOIFIFOs: FIFOs named by -i and -o are opened as the box user sees
// them, in ioi/isolate's order, waiting for the other end until the wall
// limit; what the box may not open is refused.
func TestIOIFIFOs(t *testing.T) {
	ioiBoxRoot(t)
	ioiBox(t, 337)
	ff := shareDir(t)
	for _, f := range []string{"in", "out", "private"} {
		if err := syscall.Mkfifo(filepath.Join(ff, f), 0o666); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(ff, f), 0o666)
	}
	os.Chmod(filepath.Join(ff, "private"), 0o600)
	bind := "--dir=/ff=" + ff + ":rw"

	// The writer comes after isolate has started waiting.
	go func() {
		time.Sleep(200 * time.Millisecond)
		os.WriteFile(filepath.Join(ff, "in"), []byte("hello\n"), 0)
	}()
	m, res := ioiMeta(t, "-b", "337", bind, "--stdin=/ff/in", "-w", "5", "--run", "--", "/bin/cat")
	if res.Code != 0 || res.Stdout != "hello" || m["status"] != "" {
		t.Errorf("FIFO stdin: exit %d stdout %q meta %v stderr %q", res.Code, res.Stdout, m, res.Stderr)
	}
	// Nobody opens the other end: a wall-clock time-out, not a hang.
	m, res = ioiMeta(t, "-b", "337", bind, "--stdin=/ff/in", "-w", "0.5", "--run", "--", "/bin/cat")
	if res.Code != 1 || m["status"] != "TO" || !strings.Contains(m["message"], "wall") {
		t.Errorf("FIFO stdin without a writer: exit %d meta %v stderr %q, want a wall-clock TO", res.Code, m, res.Stderr)
	}
	m, res = ioiMeta(t, "-b", "337", bind, "--stdout=/ff/out", "-w", "0.5", "--run", "--", "/bin/echo", "x")
	if res.Code != 1 || m["status"] != "TO" || !strings.Contains(m["message"], "wall") {
		t.Errorf("FIFO stdout without a reader: exit %d meta %v stderr %q, want a wall-clock TO", res.Code, m, res.Stderr)
	}
	// The native form's --stdin names a host FIFO: the caller's to read,
	// waiting for its writer until the wall limit, never for ever.
	go func() {
		time.Sleep(200 * time.Millisecond)
		os.WriteFile(filepath.Join(ff, "in"), []byte("native\n"), 0)
	}()
	if rep, code := runBox(t, "--stdin", filepath.Join(ff, "in"), "-w", "5", "--", "/bin/cat"); code != 0 || rep.Stdout != "native\n" {
		t.Errorf("native --stdin FIFO: exit %d, report %+v", code, rep)
	}
	res = isolateCmd(t, "", "run", "--stdin", filepath.Join(ff, "in"), "-w", "0.5", "--", "/bin/cat")
	if res.Code != 2 || !strings.Contains(res.Stderr, "no writer") || strings.Count(strings.TrimSpace(res.Stderr), "\n") > 0 {
		t.Errorf("native --stdin FIFO without a writer: exit %d, stderr %q", res.Code, res.Stderr)
	}

	// The box user may not open a 0600 FIFO of root's; a path outside
	// the box and a device of a rule without "dev" are refused too.
	for _, c := range []struct{ opt, want string }{
		{"--stdin=/ff/private", "Permission denied"},
		{"--stdin=/etc/passwd", "only files under"},
		{"--stdin=/hostdev/null", "Permission denied"},
	} {
		m, res = ioiMeta(t, "-b", "337", bind, "--dir=/hostdev=/dev", c.opt, "-w", "1", "--run", "--", "/bin/cat")
		if res.Code != 2 || m["status"] != "XX" || !strings.Contains(m["message"], c.want) {
			t.Errorf("%s: exit %d meta %v, want XX %q", c.opt, res.Code, m, c.want)
		}
	}
}

// TestIOISignals: SIGTERM, SIGINT, SIGHUP or SIGQUIT sent to isolate
// mid-run ends the run as ioi/isolate's SIGNAL_INTERRUPT ends it (meta
// exitsig, status SG, message Interrupted, exit 1, "Interrupted" on
// stderr); SIGILL, SIGABRT, SIGFPE, SIGSEGV or SIGBUS (sent by kill(2), as
// judges send them) as its SIGNAL_FATAL (status XX, "Sandbox keeper
// received fatal signal N" on stderr without a prefix, exit 2). Either
// way the meta file has the program's figures and killed:1, box/ is the
// caller's again, the box's cgroups and processes are gone, and no Go
// stack trace reaches stderr. In the native form the report says which
// signal.
func TestIOISignals(t *testing.T) {
	ioiBoxRoot(t)
	boxDir := filepath.Join(ioiBox(t, 338), "box")
	dir := t.TempDir()
	type sigCase struct {
		sig    syscall.Signal
		native bool
	}
	var cases []sigCase
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGILL, syscall.SIGABRT, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGBUS} {
		cases = append(cases, sigCase{sig, false})
	}
	cases = append(cases, sigCase{syscall.SIGTERM, true}, sigCase{syscall.SIGABRT, true}, sigCase{syscall.SIGSEGV, true})
	for _, c := range cases {
		meta := filepath.Join(dir, "meta")
		args := []string{"-b", "338", "-M", meta, "-p2", "--run", "--", "/bin/sh", "-c", "sleep 60"}
		if c.native {
			args = []string{"run", "--json", "-b", "339", "--meta", meta, "--", "/bin/sh", "-c", "sleep 60"}
		}
		cmd := exec.Command(isolateBin, args...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		id := 338
		if c.native {
			id = 339
		}
		for i := 0; len(boxProcesses(id, "sleep")) == 0; i++ {
			if i == 1000 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("%v: the program never started: %s", c.sig, errb.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		cmd.Process.Signal(c.sig)
		cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		data, _ := os.ReadFile(meta)
		m := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			k, v, _ := strings.Cut(line, ":")
			m[k] = v
		}
		name := fmt.Sprintf("%v (native %v)", c.sig, c.native)
		stderr := strings.TrimSpace(errb.String())
		fatal := c.sig == syscall.SIGILL || c.sig == syscall.SIGABRT || c.sig == syscall.SIGFPE || c.sig == syscall.SIGSEGV || c.sig == syscall.SIGBUS
		switch {
		case c.native:
			var rep isolate.Report
			if err := json.Unmarshal([]byte(out.String()), &rep); err != nil || !strings.Contains(rep.Message, "interrupted") ||
				!strings.Contains(rep.Message, fmt.Sprintf("signal %d", int(c.sig))) || code == 0 {
				t.Errorf("%s: exit %d, report %+v (%v)", name, code, rep, err)
			}
		case fatal:
			want := fmt.Sprintf("Sandbox keeper received fatal signal %d", int(c.sig))
			if code != 2 || m["status"] != "XX" || m["message"] != want || stderr != want || m["exitsig"] != "" {
				t.Errorf("%s: exit %d meta %v stderr %q, want exit 2, XX, %q", name, code, m, stderr, want)
			}
		default:
			if code != 1 || m["status"] != "SG" || m["exitsig"] != strconv.Itoa(int(c.sig)) || m["message"] != "Interrupted" || stderr != "Interrupted" {
				t.Errorf("%s: exit %d meta %v stderr %q, want exit 1, SG, exitsig %d, Interrupted", name, code, m, stderr, int(c.sig))
			}
		}
		if !c.native {
			// The program ran: the meta file has its figures.
			for _, key := range []string{"killed", "time", "time-wall", "max-rss", "csw-voluntary", "csw-forced", "cg-mem"} {
				if m[key] == "" {
					t.Errorf("%s: meta lacks %s: %v", name, key, m)
				}
			}
			if m["killed"] != "1" {
				t.Errorf("%s: killed:%s", name, m["killed"])
			}
			if fi, err := os.Stat(boxDir); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: box/ not handed back: %v %v", name, fi.Mode(), err)
			}
		}
		if lines := strings.Split(stderr, "\n"); len(lines) > 1 || strings.Contains(stderr, "goroutine") {
			t.Errorf("%s: stderr has %d lines:\n%s", name, len(lines), stderr)
		}
		if viaService {
			// The service tears an interrupted run down after its
			// caller has gone: what counts is that nothing stays.
			waitFor(t, name+": the box's cgroups and processes gone", func() bool { return len(boxLeftovers(id)) == 0 })
		}
		if left := boxLeftovers(id); len(left) > 0 {
			t.Errorf("%s: left behind: %v", name, left)
		}
	}
}

// TestIOICleanupAfterSIGKILL: isolate killed with SIGKILL mid-run can
// clean up nothing; `--cleanup` then removes the box and its cgroups
// (every controller's box-N), and no process of the box remains.
func TestIOICleanupAfterSIGKILL(t *testing.T) {
	ioiBoxRoot(t)
	dir := ioiBox(t, 337)
	cmd := exec.Command(isolateBin, "-b", "337", "--cg", "-p2", "--run", "--", "/bin/sh", "-c", "sleep 60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; len(boxProcesses(337, "sleep")) == 0; i++ {
		if i == 1000 {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the program never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// --wait: through the service, the service still ends the run the
	// killed client stood for, holding the box until then.
	if res := isolateCmd(t, "", "-b", "337", "--wait", "--cleanup"); res.Code != 0 {
		t.Fatalf("--cleanup: exit %d: %s", res.Code, res.Stderr)
	}
	if left := append(boxLeftovers(337), holdCgroups("337")...); len(left) > 0 {
		t.Errorf("left after SIGKILL and --cleanup: %v", left)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("%s after --cleanup: %v", dir, err)
	}
}

// An initialised box holds the parents of box cgroups, so that its runs
// neither make nor remove them; --cleanup lets them go.
func TestIOIInitHoldsCgroupParents(t *testing.T) {
	ioiBoxRoot(t)
	if res := isolateCmd(t, "", "-b", "339", "--init"); res.Code != 0 {
		t.Fatalf("--init: exit %d: %s", res.Code, res.Stderr)
	}
	holds := holdCgroups("339")
	if len(holds) == 0 {
		t.Error("no hold of the cgroup parents")
	}
	for i := 0; i < 2; i++ {
		if res := isolateCmd(t, "", "-b", "339", "--run", "--", "/bin/true"); res.Code != 0 {
			t.Fatalf("--run: exit %d: %s", res.Code, res.Stderr)
		}
	}
	for _, h := range holds {
		if _, err := os.Stat(h); err != nil {
			t.Errorf("hold gone after the runs: %v", err)
		}
	}
	if res := isolateCmd(t, "", "-b", "339", "--cleanup"); res.Code != 0 {
		t.Fatalf("--cleanup: exit %d: %s", res.Code, res.Stderr)
	}
	if left := append(boxLeftovers(339), holdCgroups("339")...); len(left) > 0 {
		t.Errorf("left after --cleanup: %v", left)
	}
}

// TestIOIHandBackClosesBox: a program that opens box/ and its /tmp (a tmp
// rule's directory) to everyone leaves neither open: after the run box/
// is the caller's with mode 0700 and the tmp directory 0700 again, so no
// local user can plant a link there for root to follow later.
func TestIOIHandBackClosesBox(t *testing.T) {
	ioiBoxRoot(t)
	dir := ioiBox(t, 334)
	res := isolateCmd(t, "", "-b", "334", "-p", "--run", "--", "/bin/sh", "-c", "mkdir /box/d && chmod 0777 /box /box/d /tmp")
	if res.Code != 0 {
		t.Fatalf("--run: exit %d: %s", res.Code, res.Stderr)
	}
	for _, c := range []struct {
		path string
		uid  uint32
	}{{filepath.Join(dir, "box"), 0}, {filepath.Join(dir, "tmp", "tmp"), isolate.FirstUID + 334}} {
		fi, err := os.Stat(c.path)
		if err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != c.uid {
			t.Errorf("%s after the run: %v (uid %v), want mode 0700, uid %d", c.path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, c.uid)
		}
	}
	// The test's own box root is reachable to all, as the machine's is.
	for p := filepath.Dir(dir); strings.HasPrefix(p, os.TempDir()+"/Test"); p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	plant := exec.Command("/bin/ln", "-s", "/etc/shadow", filepath.Join(dir, "box", "d", "out"))
	plant.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := plant.CombinedOutput(); err == nil {
		t.Errorf("nobody planted a symlink in box/d after the run: %s", out)
	}
}

// restrictedCalls tries what ioi/isolate's syscall_flags restrict: keyctl
// (1), AF_VSOCK sockets (2), io_uring (8), and prints each errno.
const restrictedCalls = `#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
	char params[120] = {0};
	errno = 0; syscall(SYS_keyctl, 0, 0, 0, 0, 0); printf("keyctl %s\n", strerror(errno));
	errno = 0; socket(40 /* AF_VSOCK */, SOCK_STREAM, 0); printf("vsock %s\n", strerror(errno));
	errno = 0; syscall(425 /* io_uring_setup */, 1, params); printf("io_uring %s\n", strerror(errno));
	return 0;
}
`

// TestIOIParity: ioi/isolate 2.3-2.6 in the ioi form. --check-config
// parses the configuration and says nothing when it is valid (2.3);
// --syscalls is accepted (2.4) and, whatever its flags, keyctl, AF_VSOCK
// and io_uring stay refused (2.6 turned io_uring off); /dev/shm is the
// box's own, not shared with a box running beside it (2.6).
func TestIOIParity(t *testing.T) {
	needRoot(t)
	cfgDir := t.TempDir()
	good, bad := filepath.Join(cfgDir, "good"), filepath.Join(cfgDir, "bad")
	os.WriteFile(good, []byte("box_root = /var/local/lib/isolate\nnum_boxes = 100\nsyscall_flags = 31\n"), 0o644)
	os.WriteFile(bad, []byte("box_root = /var/local/lib/isolate\nfrobnicate = 1\n"), 0o644)
	for _, c := range []struct {
		cfg  string
		code int
	}{{good, 0}, {bad, 2}} {
		cmd := exec.Command(isolateBin, "--check-config")
		cmd.Env = append(os.Environ(), "ISOLATE_CONFIG="+c.cfg)
		out, _ := cmd.CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if code := cmd.ProcessState.ExitCode(); code != c.code || (c.code == 0) != (len(out) == 0) ||
			c.code != 0 && (len(lines) != 1 || !strings.Contains(lines[0], c.cfg+":2")) {
			t.Errorf("--check-config of %s: exit %d %q, want exit %d", filepath.Base(c.cfg), code, out, c.code)
		}
	}
	if res := isolateCmd(t, "", "--syscalls=x", "--run", "--", "/bin/true"); res.Code != 2 || !strings.Contains(res.Stderr, "--syscalls") {
		t.Errorf("--syscalls=x: exit %d %q", res.Code, res.Stderr)
	}

	ioiBoxRoot(t)
	dir := shareDir(t)
	compileC(t, dir, "calls", restrictedCalls, "-static")
	ioiBox(t, 340)
	for _, flags := range []string{"--syscalls=31", "--syscalls=0"} {
		res := isolateCmd(t, "", "-b", "340", "-d", "/t="+dir, flags, "--run", "--", "/t/calls")
		want := "keyctl Operation not permitted\nvsock Operation not permitted\nio_uring Operation not permitted\n"
		if res.Code != 0 || res.Stdout != want {
			t.Errorf("%s: exit %d stdout %q stderr %q, want each refused", flags, res.Code, res.Stdout, res.Stderr)
		}
	}

	// /dev/shm: box 340 leaves a file there and waits; box 341, beside
	// it, sees an empty /dev/shm.
	ioiBox(t, 341)
	ready := filepath.Join(ioiBoxDir(t, 340), "ready")
	holder := exec.Command(isolateBin, "-b", "340", "-p", "--run", "--", "/bin/sh", "-c", "echo secret > /dev/shm/mark && touch /box/ready && sleep 60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer holder.Process.Signal(syscall.SIGTERM)
	for i := 0; ; i++ {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if i == 1000 {
			t.Fatal("box 340 never wrote its mark")
		}
		time.Sleep(10 * time.Millisecond)
	}
	res := isolateCmd(t, "", "-b", "341", "--run", "--", "/bin/ls", "-A", "/dev/shm")
	if res.Code != 0 || res.Stdout != "" {
		t.Errorf("/dev/shm of box 341 beside box 340: exit %d %q %q, want empty", res.Code, res.Stdout, res.Stderr)
	}
}

// ioiBoxDir is box id's box/ under the test's box root.
func ioiBoxDir(t *testing.T, id int) string {
	t.Helper()
	cfg, err := isolate.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(isolate.BoxPath(cfg.BoxRoot, id), "box")
}

// TestIOIBoxIDsAboveDefault: box ids are 0 to num_boxes-1 (1000 by
// default, as ioi/isolate's num_boxes): CMS workers' ids, (1+shard)*1000
// plus an index, work once num_boxes is raised, up to 64999 for its 64
// shards; the box runs as uid 60000+N.
func TestIOIBoxIDsAboveDefault(t *testing.T) {
	needRoot(t)
	root := filepath.Join(t.TempDir(), "boxes")
	cfg := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(cfg, []byte("box_root = "+root+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ISOLATE_CONFIG", cfg)
	if res := isolateCmd(t, "", "-b", "1000", "--init"); res.Code != 2 || !strings.Contains(res.Stderr, "(allowed: 0-999)") {
		t.Errorf("box 1000 with the default num_boxes: exit %d %q", res.Code, res.Stderr)
	}
	if err := os.WriteFile(cfg, []byte("box_root = "+root+"\nnum_boxes = 65000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{1000, 64999} {
		b := strconv.Itoa(id)
		dir := ioiBox(t, id)
		m, res := ioiMeta(t, "-b", b, "--cg", "-p", "--run", "--", "/bin/sh", "-c", "id -u > /box/uid")
		uid, _ := os.ReadFile(filepath.Join(dir, "box", "uid"))
		if res.Code != 0 || m["exitcode"] != "0" || strings.TrimSpace(string(uid)) != "1000" {
			t.Errorf("box %d: exit %d meta %v uid %q stderr %q", id, res.Code, m, uid, res.Stderr)
		}
		if fi, err := os.Stat(filepath.Join(dir, "box", "uid")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("box %d: box/uid not handed back (%v)", id, err)
		}
		if res := isolateCmd(t, "", "-b", b, "--cleanup"); res.Code != 0 {
			t.Errorf("box %d --cleanup: exit %d %q", id, res.Code, res.Stderr)
		}
		if left := boxLeftovers(id); len(left) > 0 {
			t.Errorf("box %d: left %v", id, left)
		}
	}
}

// TestIOIRunWritesBoundedByCgMem: boxes share the box root's tmpfs, and
// what one run writes there counts in its memory cgroup: a run with
// --cg-mem=32768 cannot leave more than 32 MiB in box/.
func TestIOIRunWritesBoundedByCgMem(t *testing.T) {
	ioiBoxRoot(t)
	dir := ioiBox(t, 342)
	m, res := ioiMeta(t, "-b", "342", "--cg", "--cg-mem=32768", "-p", "--run", "--", "/bin/sh", "-c", "head -c 100000000 /dev/zero > /box/big")
	fi, err := os.Stat(filepath.Join(dir, "box", "big"))
	if res.Code != 1 || m["cg-oom-killed"] != "1" || err != nil || fi.Size() > 32<<20 {
		t.Errorf("writing 100 MB with --cg-mem=32768: exit %d meta %v, box/big %v (%v)", res.Code, m, fi, err)
	}
}

// A field the runtime checks is named as the ioi form's option.
func TestIOINamesItsOwnOptions(t *testing.T) {
	ioiBoxRoot(t)
	ioiBox(t, 297)
	m, res := ioiMeta(t, "-b", "297", "--dir=/x=/no/such/dir", "--run", "--", "/bin/true")
	if res.Code != 2 || !strings.Contains(m["message"], "--dir /no/such/dir") {
		t.Errorf("--dir of a missing directory: exit %d, meta %v, stderr %q", res.Code, m, res.Stderr)
	}
}

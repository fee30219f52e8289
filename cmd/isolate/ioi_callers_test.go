package main

// The real callers of ioi/isolate, replayed: CMS's cms/grading/Sandbox.py
// (with the settings of cms/grading/steps/compilation.py and
// evaluation.py) and Judge0's app/jobs/isolate_job.rb. Each builds the
// exact command lines those files build, runs them the way they run them
// (CMS: Popen with pipes and --stdin/--stdout/--stderr inside the box;
// Judge0: a shell with < > 2> around isolate) and reads the meta file the
// way each of them parses it.

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
)

// judgeProgram is the submission both judges compile: its first argument
// picks what it does.
const judgeProgram = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
	const char *m = argc > 1 ? argv[1] : "sum";
	if (!strcmp(m, "sum")) { long a, b; if (scanf("%ld %ld", &a, &b) != 2) return 2; printf("%ld\n", a + b); fprintf(stderr, "debug line\n"); return 0; }
	if (!strcmp(m, "loop")) { volatile unsigned long x = 0; for (;;) x++; }
	if (!strcmp(m, "sleep")) { sleep(60); return 0; }
	if (!strcmp(m, "mem")) { for (int i = 0; i < 1024; i++) { char *p = malloc(1 << 20); if (!p) return 3; memset(p, i, 1 << 20); } return 0; }
	if (!strcmp(m, "exit")) return 3;
	if (!strcmp(m, "segv")) { volatile int *p = 0; return *p; }
	return 100;
}
`

// ---- CMS ----------------------------------------------------------------

// cmsSandbox mirrors cms.grading.Sandbox.Sandbox: an outer directory
// with home/ bound as /tmp (the working directory), meta files run.meta.N
// in the outer directory, and its options in build_box_options' order.
type cmsSandbox struct {
	t       *testing.T
	boxID   int
	outer   string
	home    string
	execNum int

	dirs          [][3]string // src ("" for none), dest, options ("" for none)
	preserveEnv   bool
	setEnv        map[string]string
	fsize         int64 // bytes
	stdinFile     string
	stdoutFile    string
	stderrFile    string
	stackSpace    int64 // bytes
	addressSpace  int64 // bytes (passed as --cg-mem in KiB)
	timeout       float64
	wallclock     float64
	extraTimeout  float64
	maxProcesses  int
	lastArgs      []string
	lastIsolateRC int
}

func newCMSSandbox(t *testing.T, boxID int) *cmsSandbox {
	t.Helper()
	outer, err := os.MkdirTemp("", "cms-unnamed-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outer) })
	s := &cmsSandbox{t: t, boxID: boxID, outer: outer, home: filepath.Join(outer, "home"), execNum: -1,
		setEnv: map[string]string{"HOME": "/tmp"}, maxProcesses: 1}
	if err := os.Mkdir(s.home, 0o755); err != nil {
		t.Fatal(err)
	}
	s.allowWritingAll()
	s.dirs = append(s.dirs, [3]string{s.home, "/tmp", "rw"}, [3]string{"", "/dev/shm", "tmp"})
	for _, d := range []struct{ src, opts string }{{"/etc/alternatives", ""}, {"/opt/pypy3", ""}, {"/etc/mono", "noexec"}} {
		if _, err := os.Stat(d.src); err == nil {
			s.dirs = append(s.dirs, [3]string{d.src, d.src, d.opts})
		}
	}
	// Sandbox.__init__: an idempotent cleanup, then --init.
	s.cleanup(false)
	if res := isolateCmd(t, "", "--box-id="+strconv.Itoa(boxID), "--cg", "--init"); res.Code != 0 {
		t.Fatalf("isolate --init: exit %d: %s", res.Code, res.Stderr)
	}
	return s
}

func (s *cmsSandbox) allowWritingAll() {
	os.Chmod(s.home, 0o777)
	entries, _ := os.ReadDir(s.home)
	for _, e := range entries {
		os.Chmod(filepath.Join(s.home, e.Name()), 0o777)
	}
}

// allowWritingOnly is Sandbox.allow_writing_only: home read-only to the
// box user, the named files pre-created and writable to all; a name
// outside home (a FIFO of Communication, /fifo0/u0_to_m) is ignored.
func (s *cmsSandbox) allowWritingOnly(names ...string) {
	var outer []string
	for _, n := range names {
		if inner := innerAbsolutePath(n); strings.HasPrefix(inner, "/tmp/") {
			outer = append(outer, filepath.Join(s.home, strings.TrimPrefix(inner, "/tmp/")))
		}
	}
	for _, p := range outer {
		if _, err := os.Stat(p); err != nil {
			os.WriteFile(p, nil, 0o644)
		}
	}
	os.Chmod(s.home, 0o755)
	entries, _ := os.ReadDir(s.home)
	for _, e := range entries {
		os.Chmod(filepath.Join(s.home, e.Name()), 0o755)
	}
	for _, p := range outer {
		os.Chmod(p, 0o722)
	}
}

// innerAbsolutePath is Sandbox.inner_absolute_path, Python's
// os.path.join("/tmp", path): an absolute path stays as it is.
func innerAbsolutePath(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join("/tmp", p)
}

// boxOptions is Sandbox.build_box_options.
func (s *cmsSandbox) boxOptions() []string {
	res := []string{"--cg", "--box-id=" + strconv.Itoa(s.boxID), "--chdir=/tmp"}
	for _, d := range s.dirs {
		v := d[1]
		if d[0] != "" {
			v += "=" + d[0]
		}
		if d[2] != "" {
			v += ":" + d[2]
		}
		res = append(res, "--dir="+v)
	}
	if s.preserveEnv {
		res = append(res, "--full-env")
	}
	keys := make([]string, 0, len(s.setEnv))
	for k := range s.setEnv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		res = append(res, "--env="+k+"="+s.setEnv[k])
	}
	if s.fsize > 0 {
		res = append(res, fmt.Sprintf("--fsize=%d", s.fsize/1024))
	}
	if s.stdinFile != "" {
		res = append(res, "--stdin="+innerAbsolutePath(s.stdinFile))
	}
	if s.stackSpace > 0 {
		res = append(res, fmt.Sprintf("--stack=%d", s.stackSpace/1024))
	}
	if s.addressSpace > 0 {
		res = append(res, fmt.Sprintf("--cg-mem=%d", s.addressSpace/1024))
	}
	if s.stdoutFile != "" {
		res = append(res, "--stdout="+innerAbsolutePath(s.stdoutFile))
	}
	res = append(res, fmt.Sprintf("--processes=%d", s.maxProcesses))
	if s.stderrFile != "" {
		res = append(res, "--stderr="+innerAbsolutePath(s.stderrFile))
	}
	if s.timeout > 0 {
		res = append(res, "--time="+strconv.FormatFloat(s.timeout, 'g', -1, 64))
	}
	if s.wallclock > 0 {
		res = append(res, "--wall-time="+strconv.FormatFloat(s.wallclock, 'g', -1, 64))
	}
	if s.extraTimeout > 0 {
		res = append(res, "--extra-time="+strconv.FormatFloat(s.extraTimeout, 'g', -1, 64))
	}
	res = append(res, fmt.Sprintf("--meta=%s.%d", filepath.Join(s.outer, "run.meta"), s.execNum))
	return append(res, "--run")
}

// execute is Sandbox.execute_without_std(command, wait=True): stdin a
// pipe closed at once, stdout and stderr pipes read to the end; exit
// status 0 or 1 is a sandbox success, 2 a sandbox error.
func (s *cmsSandbox) execute(command ...string) bool {
	s.t.Helper()
	s.execNum++
	s.lastArgs = append(append(s.boxOptions(), "--"), command...)
	cmd := exec.Command(isolateBin, s.lastArgs...)
	cmd.Stdin = strings.NewReader("")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	s.lastIsolateRC = 0
	if ee, ok := err.(*exec.ExitError); ok {
		s.lastIsolateRC = ee.ExitCode()
	} else if err != nil {
		s.t.Fatal(err)
	}
	switch s.lastIsolateRC {
	case 0, 1:
		return true
	case 2:
		return false
	}
	s.t.Fatalf("isolate exit status %d unknown to CMS\nargs: %q\nstderr: %s", s.lastIsolateRC, s.lastArgs, errb.String())
	return false
}

// start is Sandbox.execute_without_std(command, wait=False): Popen with
// pipes for all three streams; wait is wait_without_std: stdin closed at
// once, stdout and stderr read to the end, then the exit status.
func (s *cmsSandbox) start(command ...string) *cmsProcess {
	s.t.Helper()
	s.execNum++
	s.lastArgs = append(append(s.boxOptions(), "--"), command...)
	p := &cmsProcess{s: s, execNum: s.execNum, cmd: exec.Command(isolateBin, s.lastArgs...)}
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if err := p.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	stdin.Close()
	return p
}

// cmsProcess is one isolate that CMS started without waiting.
type cmsProcess struct {
	s        *cmsSandbox
	execNum  int
	cmd      *exec.Cmd
	out, err bytes.Buffer
}

// wait is wait_without_std and translate_box_exitcode for one process:
// whether the sandbox worked.
func (p *cmsProcess) wait() bool {
	p.s.t.Helper()
	err := p.cmd.Wait()
	rc := 0
	if ee, ok := err.(*exec.ExitError); ok {
		rc = ee.ExitCode()
	} else if err != nil {
		p.s.t.Fatal(err)
	}
	switch rc {
	case 0, 1:
		return true
	case 2:
		return false
	}
	p.s.t.Fatalf("isolate exit status %d unknown to CMS\nstderr: %s", rc, p.err.String())
	return false
}

// evaluateAsync is evaluation_step_before_run(..., wait=False).
func (s *cmsSandbox) evaluateAsync(timeLimit float64, memoryBytes int64, dirs map[string]string, writable []string, stdin, stdout string, command ...string) *cmsProcess {
	s.t.Helper()
	s.timeout, s.wallclock = timeLimit, 2*timeLimit+1
	s.addressSpace = memoryBytes
	s.fsize = 1 << 30
	if stdout == "" {
		stdout = "stdout.txt"
	}
	s.stdinFile, s.stdoutFile, s.stderrFile = stdin, stdout, "stderr.txt"
	for src, dest := range dirs {
		s.dirs = append(s.dirs, [3]string{src, dest, "rw"})
	}
	s.allowWritingOnly(append(writable, s.stderrFile, s.stdoutFile)...)
	s.maxProcesses = 1
	return s.start(command...)
}

// meta is Sandbox.get_meta: every line is key:value.
func (s *cmsSandbox) meta() map[string][]string {
	s.t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("%s.%d", filepath.Join(s.outer, "run.meta"), s.execNum))
	if err != nil {
		s.t.Fatalf("CMS cannot read the meta file: %v", err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			s.t.Fatalf("meta line %q has no ':' (CMS would raise)", line)
		}
		m[k] = append(m[k], v)
	}
	return m
}

// exitStatus is Sandbox.get_exit_status.
func (s *cmsSandbox) exitStatus() string {
	m := s.meta()
	status := m["status"]
	has := func(v string) bool {
		for _, x := range status {
			if x == v {
				return true
			}
		}
		return false
	}
	switch {
	case has("XX"):
		return "sandbox error"
	case has("TO"):
		if msg, ok := m["message"]; ok && strings.Contains(msg[0], "wall") {
			return "wall timeout"
		}
		return "timeout"
	case has("SG"):
		if _, ok := m["cg-oom-killed"]; ok {
			return "memory limit exceeded"
		}
		return "signal"
	case has("RE"):
		return "nonzero return"
	}
	return "ok"
}

// cleanup is Sandbox.cleanup.
func (s *cmsSandbox) cleanup(delete bool) {
	s.t.Helper()
	exe := []string{"--box-id=" + strconv.Itoa(s.boxID), "--cg"}
	if delete {
		isolateCmd(s.t, "", append(exe, "--dir=/tmp="+s.home+":rw", "--run", "--", "/bin/chmod", "777", "-R", "/tmp")...)
	}
	if res := isolateCmd(s.t, "", append(exe, "--cleanup")...); res.Code != 0 {
		s.t.Fatalf("isolate --cleanup: exit %d: %s", res.Code, res.Stderr)
	}
	if delete {
		if err := os.RemoveAll(s.outer); err != nil {
			s.t.Fatalf("CMS cannot delete its sandbox: %v", err)
		}
	}
}

// evaluate is evaluation_step_before_run + execute for one command.
func (s *cmsSandbox) evaluate(timeLimit float64, memoryBytes int64, stdin, stdout string, command ...string) string {
	s.t.Helper()
	s.timeout, s.wallclock = timeLimit, 2*timeLimit+1
	s.addressSpace = memoryBytes
	s.fsize = 1 << 30
	s.stdinFile, s.stdoutFile, s.stderrFile = stdin, stdout, "stderr.txt"
	s.allowWritingOnly(s.stderrFile, s.stdoutFile)
	s.maxProcesses = 1
	if !s.execute(command...) {
		s.t.Fatalf("sandbox error: %v\nargs %q", s.meta(), s.lastArgs)
	}
	return s.exitStatus()
}

func TestCMSSandboxFlow(t *testing.T) {
	needRoot(t)
	boxRoot := ioiBoxRoot(t)
	s := newCMSSandbox(t, 310)
	if _, err := os.Stat(filepath.Join(boxRoot, "310", "box")); err != nil {
		t.Fatalf("--init made no box: %v", err)
	}

	// compilation_step: /etc visible, the worker's environment, many
	// processes (gcc runs cc1, as, collect2, ld), 10 s, 512 MiB.
	if err := os.WriteFile(filepath.Join(s.home, "prog.c"), []byte(judgeProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	s.allowWritingAll()
	s.dirs = append(s.dirs, [3]string{"/etc", "/etc", ""})
	s.preserveEnv = true
	s.maxProcesses = 1000
	s.timeout, s.wallclock = 10, 21
	s.addressSpace = 512 << 20
	s.stdoutFile, s.stderrFile = "compilation_stdout_0.txt", "compilation_stderr_0.txt"
	if !s.execute("/usr/bin/gcc", "-DEVAL", "-std=gnu11", "-O2", "-pipe", "-static", "-s", "-o", "prog", "prog.c", "-lm") {
		t.Fatalf("compilation: sandbox error %v", s.meta())
	}
	if st := s.exitStatus(); st != "ok" {
		stderr, _ := os.ReadFile(filepath.Join(s.home, s.stderrFile))
		t.Fatalf("compilation: %s %v\n%s", st, s.meta(), stderr)
	}
	if fi, err := os.Stat(filepath.Join(s.home, "prog")); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("compilation made no executable: %v", err)
	}
	s.dirs = s.dirs[:len(s.dirs)-1]
	s.preserveEnv = false

	// The same compiler with one process (isolate's default) cannot fork.
	s.maxProcesses = 1
	s.stdoutFile, s.stderrFile = "compilation_stdout_1.txt", "compilation_stderr_1.txt"
	s.execute("/usr/bin/gcc", "-o", "prog2", "prog.c")
	if st := s.exitStatus(); st == "ok" {
		t.Errorf("gcc with --processes=1 succeeded, want a failure to fork")
	}

	// evaluation_step, one verdict per program behaviour.
	if err := os.WriteFile(filepath.Join(s.home, "input.txt"), []byte("40 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := s.evaluate(1, 64<<20, "input.txt", "output.txt", "./prog", "sum"); st != "ok" {
		t.Fatalf("correct program: %s %v", st, s.meta())
	}
	if out, _ := os.ReadFile(filepath.Join(s.home, "output.txt")); string(out) != "42\n" {
		t.Errorf("output.txt = %q, want 42", out)
	}
	if errOut, _ := os.ReadFile(filepath.Join(s.home, "stderr.txt")); string(errOut) != "debug line\n" {
		t.Errorf("stderr.txt = %q", errOut)
	}
	m := s.meta()
	for _, k := range []string{"time", "time-wall", "max-rss", "cg-mem", "csw-voluntary", "csw-forced", "exitcode"} {
		if _, ok := m[k]; !ok {
			t.Errorf("meta lacks %s: %v", k, m)
		}
	}
	if v, _ := strconv.Atoi(m["cg-mem"][0]); v <= 0 {
		t.Errorf("cg-mem %v: CMS reads memory from it", m["cg-mem"])
	}

	if st := s.evaluate(0.5, 64<<20, "input.txt", "output.txt", "./prog", "loop"); st != "timeout" {
		t.Errorf("CPU loop: %s %v, want timeout", st, s.meta())
	} else if tm, _ := strconv.ParseFloat(s.meta()["time"][0], 64); tm < 0.5 {
		t.Errorf("CPU loop killed after %.3f s of CPU, before the 0.5 s limit", tm)
	}
	if st := s.evaluate(0.3, 64<<20, "input.txt", "output.txt", "./prog", "sleep"); st != "wall timeout" {
		t.Errorf("sleeper: %s %v, want wall timeout", st, s.meta())
	}
	if st := s.evaluate(2, 64<<20, "input.txt", "output.txt", "./prog", "mem"); st != "memory limit exceeded" {
		t.Errorf("1 GiB in a 64 MiB box: %s %v, want memory limit exceeded", st, s.meta())
	}
	if st := s.evaluate(1, 64<<20, "input.txt", "output.txt", "./prog", "exit"); st != "nonzero return" {
		t.Errorf("exit 3: %s %v", st, s.meta())
	} else if s.meta()["exitcode"][0] != "3" {
		t.Errorf("exitcode %v, want 3", s.meta()["exitcode"])
	}
	if st := s.evaluate(1, 64<<20, "input.txt", "output.txt", "./prog", "segv"); st != "signal" {
		t.Errorf("segfault: %s %v", st, s.meta())
	} else if s.meta()["exitsig"][0] != "11" {
		t.Errorf("exitsig %v, want 11", s.meta()["exitsig"])
	}

	// The program may only write the files CMS made writable.
	if st := s.evaluate(1, 64<<20, "", "output.txt", "/bin/sh", "-c", "echo x > /tmp/other.txt"); st != "nonzero return" {
		t.Errorf("writing a file CMS did not allow: %s, want nonzero return", st)
	}

	s.cleanup(true)
	if _, err := os.Stat(filepath.Join(boxRoot, "310")); !os.IsNotExist(err) {
		t.Errorf("box directory left after --cleanup: %v", err)
	}
}

// communicationManager is a Communication task's manager, as CMS's test
// suite writes them (cmstestsuite/tasks/communication_many_stdio_stubbed):
// argv is from-user and to-user FIFO of each user process; it opens them
// in the order the sandbox opens a user's stdin and then stdout, talks,
// and prints the score.
const communicationManager = `#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
	int n = (argc - 1) / 2, ok = 1, base;
	FILE *to[8], *from[8];
	for (int i = 0; i < n; i++) {
		to[i] = fopen(argv[2 + 2 * i], "w");
		from[i] = fopen(argv[1 + 2 * i], "r");
		if (!to[i] || !from[i]) { printf("0\n"); return 1; }
	}
	FILE *in = fopen("input.txt", "r");
	if (!in || fscanf(in, "%d", &base) != 1) return 1;
	for (int k = 1; k <= 10 && ok; k++)
		for (int i = 0; i < n && ok; i++) {
			int x = base + k, got;
			fprintf(to[i], "%d\n", x); fflush(to[i]);
			if (fscanf(from[i], " correct %d", &got) != 1 || got != (i ? -x : x)) ok = 0;
		}
	for (int i = 0; i < n; i++) { fprintf(to[i], "0\n"); fflush(to[i]); }
	FILE *out = fopen("output.txt", "w");
	if (out) fprintf(out, "done\n");
	printf("%d\n", ok);
	return 0;
}
`

// communicationUser is the contestant's program with std_io: questions
// on stdin, answers on stdout; the second of two processes (argument
// "1") answers with the negated number.
const communicationUser = `#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
	int sign = argc > 1 && atoi(argv[1]) == 1 ? -1 : 1, x;
	while (scanf("%d", &x) == 1 && x != 0) { printf("correct %d\n", sign * x); fflush(stdout); }
	return 0;
}
`

// TestCMSCommunicationStdIO replays cms/grading/tasktypes/Communication.py
// with user_io std_io, for one and for two user processes: FIFOs made
// 0666 in 0755 directories, bound rw as /fifoI into the manager's box and
// each user's; the manager (time limit max(n*(t+1), trusted max), its
// stdin input.txt) opens them itself; each user's isolate opens them as
// --stdin=/fifoI/m_to_uI --stdout=/fifoI/uI_to_m; all run at once.
func TestCMSCommunicationStdIO(t *testing.T) {
	ioiBoxRoot(t)
	bins := shareDir(t)
	manager := compileC(t, bins, "manager", communicationManager, "-static")
	user := compileC(t, bins, "user", communicationUser, "-static")
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d-processes", n), func(t *testing.T) {
			fifoTmp := shareDir(t)
			var fifoDirs []string
			for i := 0; i < n; i++ {
				d := filepath.Join(fifoTmp, fmt.Sprintf("fifo-%d", i))
				os.Mkdir(d, 0o700)
				for _, f := range []string{fmt.Sprintf("u%d_to_m", i), fmt.Sprintf("m_to_u%d", i)} {
					if err := syscall.Mkfifo(filepath.Join(d, f), 0o600); err != nil {
						t.Fatal(err)
					}
					os.Chmod(filepath.Join(d, f), 0o666)
				}
				os.Chmod(d, 0o755)
				fifoDirs = append(fifoDirs, d)
			}
			mgr := newCMSSandbox(t, 312)
			copyExecutable(t, manager, filepath.Join(mgr.home, "manager"))
			os.WriteFile(filepath.Join(mgr.home, "input.txt"), []byte("100\n"), 0o644)
			cmd := []string{"./manager"}
			mgrDirs := map[string]string{}
			for i := 0; i < n; i++ {
				cmd = append(cmd, fmt.Sprintf("/fifo%d/u%d_to_m", i, i), fmt.Sprintf("/fifo%d/m_to_u%d", i, i))
				mgrDirs[fifoDirs[i]] = fmt.Sprintf("/fifo%d", i)
			}
			const timeLimit = 1.0
			mp := mgr.evaluateAsync(math.Max(float64(n)*(timeLimit+1), 10), 512<<20, mgrDirs, []string{"output.txt"}, "input.txt", "", cmd...)
			var users []*cmsSandbox
			var procs []*cmsProcess
			for i := 0; i < n; i++ {
				u := newCMSSandbox(t, 313+i)
				copyExecutable(t, user, filepath.Join(u.home, "user"))
				var args []string
				if n != 1 {
					args = append(args, strconv.Itoa(i))
				}
				fifo := fmt.Sprintf("/fifo%d", i)
				procs = append(procs, u.evaluateAsync(timeLimit, 64<<20, map[string]string{fifoDirs[i]: fifo}, nil,
					fifo+fmt.Sprintf("/m_to_u%d", i), fifo+fmt.Sprintf("/u%d_to_m", i), append([]string{"./user"}, args...)...))
				users = append(users, u)
			}
			for i, p := range procs {
				if !p.wait() {
					t.Errorf("user %d: sandbox error %v (isolate stderr %q)\nargs %q", i, users[i].meta(), p.err.String(), users[i].lastArgs)
				} else if st := users[i].exitStatus(); st != "ok" {
					t.Errorf("user %d: %s %v", i, st, users[i].meta())
				}
			}
			if !mp.wait() {
				t.Fatalf("manager: sandbox error %v", mgr.meta())
			}
			if st := mgr.exitStatus(); st != "ok" {
				t.Fatalf("manager: %s %v", st, mgr.meta())
			}
			if score, _ := os.ReadFile(filepath.Join(mgr.home, "stdout.txt")); string(score) != "1\n" {
				t.Errorf("manager's score %q, want 1 (the exchange through the FIFOs failed)", score)
			}
			for _, u := range users {
				u.cleanup(true)
			}
			mgr.cleanup(true)
		})
	}
}

// copyExecutable is Sandbox.create_file_from_storage(..., executable=True).
func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// ---- Judge0 -------------------------------------------------------------

// judge0Job mirrors IsolateJob: box files in <workdir>/box, the
// program's streams and the metadata file in <workdir>, everything run
// through a shell.
type judge0Job struct {
	t                                               *testing.T
	boxID                                           int
	cgroups                                         string
	workdir, boxdir, tmpdir                         string
	stdinFile, stdoutFile, stderrFile, metadataFile string
}

func (j *judge0Job) sh(command string) int {
	j.t.Helper()
	cmd := exec.Command("/bin/sh", "-c", command)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	_ = out
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		j.t.Fatal(err)
	}
	return 0
}

func newJudge0Job(t *testing.T, boxID int) *judge0Job {
	t.Helper()
	j := &judge0Job{t: t, boxID: boxID, cgroups: "--cg"}
	out, err := exec.Command("/bin/sh", "-c", fmt.Sprintf("%s %s -b %d --init", isolateBin, j.cgroups, boxID)).Output()
	if err != nil {
		t.Fatalf("isolate --init: %v", err)
	}
	j.workdir = strings.TrimRight(string(out), "\n")
	j.boxdir, j.tmpdir = j.workdir+"/box", j.workdir+"/tmp"
	j.stdinFile, j.stdoutFile = j.workdir+"/stdin.txt", j.workdir+"/stdout.txt"
	j.stderrFile, j.metadataFile = j.workdir+"/stderr.txt", j.workdir+"/metadata.txt"
	for _, f := range []string{j.stdinFile, j.stdoutFile, j.stderrFile, j.metadataFile} {
		j.sh("touch " + f + " && chown $(whoami): " + f)
	}
	return j
}

// metadata is IsolateJob#get_metadata: key before the first ':', value
// the rest.
func (j *judge0Job) metadata() map[string]string {
	data, err := os.ReadFile(j.metadataFile)
	if err != nil {
		j.t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range strings.Split(string(data), "\n") {
		if e == "" {
			continue
		}
		parts := strings.Split(e, ":")
		m[parts[0]] = strings.Join(parts[1:], ":")
	}
	return m
}

const judge0Env = `-E HOME=/tmp -E PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" -E LANG -E LANGUAGE -E LC_ALL -E JUDGE0_HOMEPAGE -E JUDGE0_SOURCE_CODE -E JUDGE0_MAINTAINER -E JUDGE0_VERSION -d /etc:noexec`

// compile is IsolateJob#compile with the default configuration
// (MAX_CPU_TIME_LIMIT 15, MAX_WALL_TIME_LIMIT 20, MAX_STACK_LIMIT 128000,
// MAX_MAX_PROCESSES_AND_OR_THREADS 120, MAX_MEMORY_LIMIT 512000,
// MAX_MAX_FILE_SIZE 4096, per-process limits off).
func (j *judge0Job) compile(compileCmd string) (int, string) {
	os.WriteFile(j.boxdir+"/compile.sh", []byte(compileCmd), 0o644)
	out := j.workdir + "/compile_output.txt"
	j.sh("touch " + out + " && chown $(whoami): " + out)
	rc := j.sh(fmt.Sprintf("%s %s -s -b %d -M %s --stderr-to-stdout -i /dev/null -t 15 -x 0 -w 20 -k 128000 -p120 --cg-timing --cg-mem=512000 -f 4096 %s --run -- /bin/bash $(basename %s) > %s",
		isolateBin, j.cgroups, j.boxID, j.metadataFile, judge0Env, j.boxdir+"/compile.sh", out))
	data, _ := os.ReadFile(out)
	os.Remove(out)
	os.Remove(j.boxdir + "/compile.sh")
	return rc, string(data)
}

// run is IsolateJob#run with the default limits (5 s CPU + 1 s extra,
// 10 s wall, 64000 KB stack, 60 processes, 128000 KB memory, 1024 KB
// files) unless the test changes them.
func (j *judge0Job) run(runCmd, stdin string, cpu, extra, wall float64, memKB int) int {
	os.WriteFile(j.boxdir+"/run.sh", []byte(runCmd), 0o644)
	os.WriteFile(j.stdinFile, []byte(stdin), 0o644)
	rc := j.sh(fmt.Sprintf("%s %s -s -b %d -M %s -t %g -x %g -w %g -k 64000 -p60 --cg-timing --cg-mem=%d -f 1024 %s --run -- /bin/bash $(basename %s) < %s > %s 2> %s",
		isolateBin, j.cgroups, j.boxID, j.metadataFile, cpu, extra, wall, memKB, judge0Env, j.boxdir+"/run.sh", j.stdinFile, j.stdoutFile, j.stderrFile))
	os.Remove(j.boxdir + "/run.sh")
	return rc
}

// status is IsolateJob#determine_status (without the expected output).
func (j *judge0Job) status() string {
	switch st := j.metadata()["status"]; st {
	case "TO":
		return "Time Limit Exceeded"
	case "SG":
		return "Runtime Error (SIG" + j.metadata()["exitsig"] + ")"
	case "RE":
		return "Runtime Error (NZEC)"
	case "XX":
		return "Internal Error"
	}
	return "Accepted"
}

// cleanup is IsolateJob#cleanup: it must leave no workdir behind.
func (j *judge0Job) cleanup() {
	j.sh("chown -R $(whoami): " + j.boxdir)
	j.sh("rm -rf " + j.boxdir + "/* " + j.tmpdir + "/*")
	for _, f := range []string{j.stdinFile, j.stdoutFile, j.stderrFile, j.metadataFile} {
		j.sh("rm -rf " + f)
	}
	j.sh(fmt.Sprintf("%s %s -b %d --cleanup", isolateBin, j.cgroups, j.boxID))
	if _, err := os.Stat(j.workdir); !os.IsNotExist(err) {
		j.t.Errorf("Cleanup of sandbox %d failed: %s still exists", j.boxID, j.workdir)
	}
}

func TestJudge0IsolateJobFlow(t *testing.T) {
	needRoot(t)
	ioiBoxRoot(t)
	j := newJudge0Job(t, 311)
	if err := os.WriteFile(j.boxdir+"/main.c", []byte(judgeProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	if rc, out := j.compile("/usr/bin/gcc -O2 main.c"); rc != 0 {
		t.Fatalf("compile: isolate exit %d, status %s, output %q, meta %v", rc, j.status(), out, j.metadata())
	}
	if _, err := os.Stat(j.boxdir + "/a.out"); err != nil {
		t.Fatalf("no a.out: %v", err)
	}
	// A compile error is the compiler's output on isolate's stdout.
	os.WriteFile(j.boxdir+"/bad.c", []byte("int main( {"), 0o644)
	if rc, out := j.compile("/usr/bin/gcc bad.c -o bad"); rc != 1 || !strings.Contains(out, "error") {
		t.Errorf("compile error: isolate exit %d, output %q", rc, out)
	}

	cases := []struct {
		name, cmd           string
		cpu, extra, wall    float64
		memKB               int
		want                string
		stdout, stderr      string
		exitcode, checkTime bool
	}{
		{"accepted", "./a.out sum", 5, 1, 10, 128000, "Accepted", "42\n", "debug line\n", true, false},
		{"cpu", "./a.out loop", 1, 0.5, 10, 128000, "Time Limit Exceeded", "", "", false, true},
		{"wall", "./a.out sleep", 5, 1, 0.5, 128000, "Time Limit Exceeded", "", "", false, false},
		// run.sh runs the program as a child of bash, which exits with
		// 128+signal when it dies: Judge0 sees NZEC with ioi/isolate too.
		{"memory", "./a.out mem", 5, 1, 10, 64000, "Runtime Error (NZEC)", "", "", true, false},
		{"nzec", "./a.out exit", 5, 1, 10, 128000, "Runtime Error (NZEC)", "", "", true, false},
		{"segv", "./a.out segv", 5, 1, 10, 128000, "Runtime Error (NZEC)", "", "", true, false},
		{"segv-exec", "exec ./a.out segv", 5, 1, 10, 128000, "Runtime Error (SIG11)", "", "", false, false},
	}
	for _, c := range cases {
		rc := j.run(c.cmd, "40 2\n", c.cpu, c.extra, c.wall, c.memKB)
		m := j.metadata()
		if got := j.status(); got != c.want {
			t.Errorf("%s: %s (isolate exit %d, meta %v), want %s", c.name, got, rc, m, c.want)
			continue
		}
		if (rc == 0) != (c.want == "Accepted") {
			t.Errorf("%s: isolate exit %d", c.name, rc)
		}
		if c.stdout != "" {
			if out, _ := os.ReadFile(j.stdoutFile); string(out) != c.stdout {
				t.Errorf("%s: stdout.txt %q, want %q", c.name, out, c.stdout)
			}
			if errOut, _ := os.ReadFile(j.stderrFile); string(errOut) != c.stderr {
				t.Errorf("%s: stderr.txt %q, want %q", c.name, errOut, c.stderr)
			}
		}
		if c.exitcode && m["exitcode"] == "" {
			t.Errorf("%s: no exitcode in %v", c.name, m)
		}
		if c.checkTime {
			// ioi/isolate kills at max(time, extra) of CPU: Judge0's
			// -t 5 -x 1 stops at 5 s, not 6 (see TestIOIExtraTime for
			// the bound).
			if tm, _ := strconv.ParseFloat(m["time"], 64); tm < c.cpu || tm >= c.cpu+c.extra-0.1 {
				t.Errorf("%s: killed at %.3f s of CPU, want at %.1f s (not time+extra %.1f s)", c.name, tm, c.cpu, c.cpu+c.extra)
			}
		}
		if c.name == "wall" && !strings.Contains(m["message"], "wall") {
			t.Errorf("wall timeout message %q", m["message"])
		}
		if c.name == "memory" && (m["cg-oom-killed"] != "1" || m["exitcode"] != "137") {
			t.Errorf("memory kill without cg-oom-killed:1: %v", m)
		}
		for _, k := range []string{"time", "time-wall", "cg-mem", "max-rss"} {
			if _, err := strconv.ParseFloat(m[k], 64); err != nil {
				t.Errorf("%s: %s = %q", c.name, k, m[k])
			}
		}
	}
	j.cleanup()
}

// ---- Piston -------------------------------------------------------------

// pistonJob mirrors api/src/job.js: `isolate --init --cg -bN`, the
// submission in BOX/box/submission, and safe_call's command line, run
// the way Node's child_process.spawn(..., {stdio: 'pipe'}) runs it: its
// three streams are AF_UNIX socketpairs, not pipes.
type pistonJob struct {
	t        *testing.T
	boxID    int
	dir      string // BOX/box
	meta     string
	pkgdir   string
	limit    string // --wall-time and --time: the stage's timeout and CPU time
	stdout   bytes.Buffer
	stderr   bytes.Buffer
	exitCode int
}

func newPistonJob(t *testing.T, boxID int, pkgdir string) *pistonJob {
	t.Helper()
	j := pistonBox(t, boxID, pkgdir)
	if err := os.Mkdir(filepath.Join(j.dir, "submission"), 0o777); err != nil {
		t.Fatal(err)
	}
	return j
}

// pistonBox is #create_isolate_box: `isolate --init --cg -bN`, the box
// directory from its output.
func pistonBox(t *testing.T, boxID int, pkgdir string) *pistonJob {
	t.Helper()
	out, err := exec.Command("/bin/sh", "-c", fmt.Sprintf("%s --init --cg -b%d", isolateBin, boxID)).Output()
	if err != nil || len(out) == 0 {
		t.Fatalf("isolate --init: %v %q", err, out)
	}
	return &pistonJob{t: t, boxID: boxID, dir: strings.TrimSpace(string(out)) + "/box", pkgdir: pkgdir,
		meta: filepath.Join(t.TempDir(), fmt.Sprintf("%d-metadata.txt", boxID)), limit: "3"}
}

// socketpair is one of the streams Node gives a child: the parent's end
// and the child's.
func socketpair(t *testing.T) (parent, child *os.File) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fds[0]), "parent"), os.NewFile(uintptr(fds[1]), "child")
}

// safeCall is Job.safe_call with Piston's default runtime limits
// (config.js: 64 processes, 2048 open files, 10 MB files, 3 s wall and
// CPU, no memory limit, no network, 1024 bytes of output). Output past
// the limit makes Piston send SIGABRT to isolate; then it reads the
// metadata file.
func (j *pistonJob) safeCall(file, stdin string, args ...string) map[string]string {
	j.t.Helper()
	const outputMaxSize = 1024
	cmd := exec.Command(isolateBin, append([]string{"--run", fmt.Sprintf("-b%d", j.boxID), "--meta=" + j.meta, "--cg", "-s",
		"-c", "/box/submission", "-E", "HOME=/tmp", "-E", "PATH=/usr/local/bin:/usr/bin:/bin", "-E", "PISTON_LANGUAGE=bash",
		"--dir=" + j.pkgdir, "--dir=/etc:noexec", "--processes=64", "--open-files=2048", "--fsize=10000",
		"--wall-time=" + j.limit, "--time=" + j.limit, "--extra-time=0", "--", "/bin/bash", filepath.Join(j.pkgdir, file)}, args...)...)
	var parents [3]*os.File
	var children [3]*os.File
	for i := range parents {
		parents[i], children[i] = socketpair(j.t)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = children[0], children[1], children[2]
	if err := cmd.Start(); err != nil {
		j.t.Fatal(err)
	}
	for _, c := range children {
		c.Close()
	}
	// proc.stdin.write(this.stdin) (with a newline added); end();
	// destroy().
	if !strings.HasSuffix(stdin, "\n") {
		stdin += "\n"
	}
	parents[0].WriteString(stdin)
	parents[0].Close()
	j.stdout.Reset()
	j.stderr.Reset()
	var mu sync.Mutex
	aborted := false
	var wg sync.WaitGroup
	for i, buf := range []*bytes.Buffer{&j.stdout, &j.stderr} {
		wg.Add(1)
		go func(r *os.File, buf *bytes.Buffer) {
			defer wg.Done()
			defer r.Close()
			data := make([]byte, 4096)
			for {
				n, err := r.Read(data)
				if n > 0 {
					mu.Lock()
					if buf.Len()+n > outputMaxSize {
						if !aborted {
							cmd.Process.Signal(syscall.SIGABRT)
							aborted = true
						}
					} else {
						buf.Write(data[:n])
					}
					mu.Unlock()
				}
				if err != nil {
					return
				}
			}
		}(parents[1+i], buf)
	}
	err := cmd.Wait()
	wg.Wait()
	j.exitCode = 0
	if ee, ok := err.(*exec.ExitError); ok {
		j.exitCode = ee.ExitCode()
	}
	data, err := os.ReadFile(j.meta)
	if err != nil {
		j.t.Fatalf("Error reading metadata file: %v", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			j.t.Fatalf("Failed to parse metadata file, received: %s", line)
		}
		m[k] = v
	}
	return m
}

// cleanup is Job.cleanup: isolate --cleanup --cg -bN, the metadata file
// removed.
func (j *pistonJob) cleanup() {
	j.t.Helper()
	if out, err := exec.Command("/bin/sh", "-c", fmt.Sprintf("%s --cleanup --cg -b%d", isolateBin, j.boxID)).CombinedOutput(); err != nil {
		j.t.Errorf("Failed to run isolate --cleanup: %v %s", err, out)
	}
	os.Remove(j.meta)
}

func TestPistonJobFlow(t *testing.T) {
	ioiBoxRoot(t)
	// A runtime package as Piston installs one: its run script gets the
	// submission's file name and the arguments.
	pkgdir := shareDir(t)
	if err := os.WriteFile(filepath.Join(pkgdir, "run"), []byte("#!/usr/bin/env bash\nbash \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	j := newPistonJob(t, 316, pkgdir)
	sub := filepath.Join(j.dir, "submission")
	os.WriteFile(filepath.Join(sub, "file0.code"), []byte("read a b; echo \"sum $((a + b))\"; echo note >&2\n"), 0o644)
	m := j.safeCall("run", "40 2", "file0.code")
	if j.stdout.String() != "sum 42\n" || j.stderr.String() != "note\n" || m["status"] != "" || m["exitcode"] != "0" {
		t.Errorf("stdin through a socket: stdout %q stderr %q meta %v (exit %d), want sum 42", j.stdout.String(), j.stderr.String(), m, j.exitCode)
	}

	// Runaway output: Piston sends SIGABRT to isolate and reads the
	// metadata file and the stderr it collected.
	os.WriteFile(filepath.Join(sub, "file0.code"), []byte("while :; do echo 0123456789; done\n"), 0o644)
	m = j.safeCall("run", "", "file0.code")
	if j.exitCode != 2 || m["status"] != "XX" {
		t.Errorf("SIGABRT: exit %d meta %v, want ioi/isolate's exit 2 and status XX", j.exitCode, m)
	}
	// Piston's output-limit result takes its memory and times from there.
	for _, key := range []string{"cg-mem", "time", "time-wall"} {
		if m[key] == "" {
			t.Errorf("SIGABRT: meta lacks %s: %v", key, m)
		}
	}
	if got := strings.TrimSpace(j.stderr.String()); got != "Sandbox keeper received fatal signal 6" {
		t.Errorf("SIGABRT: isolate's stderr %q, want ioi/isolate's words", got)
	}
	if lines := strings.Split(strings.TrimSpace(j.stderr.String()), "\n"); len(lines) > 1 || strings.Contains(j.stderr.String(), "goroutine") {
		t.Errorf("SIGABRT: isolate's stderr (which Piston shows users) has %d lines:\n%s", len(lines), j.stderr.String())
	}
	j.cleanup()
	if left := boxLeftovers(316); len(left) > 0 {
		t.Errorf("left after SIGABRT and --cleanup: %v", left)
	}
}

// TestPistonCompiledLanguage is Job.execute for a compiled language: the
// compile stage in the first box (compile_timeout 10 s), then a second
// box, the submission moved into it with fs.rename (rename(2)), and the
// run stage there. The boxes are directories of one file system, as in
// ioi/isolate: a hard link from one box into another works too.
func TestPistonCompiledLanguage(t *testing.T) {
	ioiBoxRoot(t)
	pkgdir := shareDir(t)
	for name, script := range map[string]string{
		"compile": "#!/usr/bin/env bash\nfor f in \"$@\"; do cp \"$f\" \"$f.c\"; done\ngcc -std=c11 -O1 -o binary *.c\nrm -f *.c\n",
		"run":     "#!/usr/bin/env bash\nshift\n./binary \"$@\"\n",
	} {
		if err := os.WriteFile(filepath.Join(pkgdir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	first := newPistonJob(t, 317, pkgdir)
	defer first.cleanup()
	src := "#include <stdio.h>\nint main(int c, char **v) { int a, b; scanf(\"%d %d\", &a, &b); printf(\"%s %d\\n\", v[1], a + b); return 0; }\n"
	if err := os.WriteFile(filepath.Join(first.dir, "submission", "file0.code"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	first.limit = "10"
	if m := first.safeCall("compile", "", "file0.code"); m["exitcode"] != "0" || m["status"] != "" {
		t.Fatalf("compile: exit %d meta %v stdout %q stderr %q", first.exitCode, m, first.stdout.String(), first.stderr.String())
	}
	second := pistonBox(t, 318, pkgdir)
	defer second.cleanup()
	if err := os.Rename(filepath.Join(first.dir, "submission"), filepath.Join(second.dir, "submission")); err != nil {
		t.Fatalf("fs.rename of submission/ into the next box: %v", err)
	}
	m := second.safeCall("run", "40 2", "file0.code", "sum")
	if second.stdout.String() != "sum 42\n" || m["exitcode"] != "0" || m["status"] != "" {
		t.Errorf("run in the second box: exit %d meta %v stdout %q stderr %q", second.exitCode, m, second.stdout.String(), second.stderr.String())
	}
	// After the run box/ is the caller's again, and a hard link across
	// boxes works as a rename does.
	bin := filepath.Join(second.dir, "submission", "binary")
	if fi, err := os.Stat(bin); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("%s after the run: %v", bin, err)
	}
	if err := os.Link(bin, filepath.Join(first.dir, "binary")); err != nil {
		t.Errorf("hard link from one box into another: %v", err)
	}
}

// boxLeftovers lists what of box id remains: its cgroups, its
// processes.
func boxLeftovers(id int) []string {
	return append(boxCgroups(strconv.Itoa(id)), boxProcesses(id, "")...)
}

// boxProcesses lists the processes of box id's user (with the command
// name comm, if not empty).
func boxProcesses(id int, comm string) []string {
	return boxUserProcesses(func(pid, uid int, name string) bool {
		return uid == isolate.FirstUID+id && (comm == "" || name == comm) && ownedHere(pid)
	})
}

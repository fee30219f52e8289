package main

// Runs by a user who is not root, with no service: the binary is started
// as nobody (SysProcAttr.Credential), as a plain user starts it. The test
// process's own cgroup is root's, so no cgroup subtree is delegated to
// nobody here: these are the refusal and the rlimits-only path.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// nobody is the user the rootless tests run as.
const nobody = 65534

// rootlessEnv is the environment of nobody's runs (rootlessEnvOf).
func rootlessEnv(t *testing.T) (env []string, tmp string) {
	t.Helper()
	return rootlessEnvOf(t, nobodyUser)
}

// rootlessEnvOf is the environment of user u's runs: a TMPDIR of its own,
// where its runtime directory (box locks, staging point, exec's boxes)
// goes, removed with the test.
func rootlessEnvOf(t *testing.T, u plainUser) (env []string, tmp string) {
	t.Helper()
	tmp = shareDir(t)
	if err := os.Chown(tmp, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=" + tmp, "ISOLATE_NO_SERVICE=1"}
	if d := os.Getenv("ISOLATE_IMAGES_DIR"); d != "" {
		env = append(env, "ISOLATE_IMAGES_DIR="+d)
	}
	cover := os.Getenv("ISOLATE_COVERDIR")
	if cover == "" {
		cover = os.Getenv("GOCOVERDIR") // the service's pass keeps it only there
	}
	if cover != "" {
		// An instrumented binary writes its counters where the user may
		// (else it warns on stderr); they join the suite's afterwards.
		own := filepath.Join(tmp, "cover")
		if err := os.Mkdir(own, 0o755); err != nil || os.Chown(own, u.uid, u.gid) != nil {
			t.Fatalf("coverage directory for %s: %v", u.name, err)
		}
		env = append(env, "GOCOVERDIR="+own)
		t.Cleanup(func() {
			files, _ := os.ReadDir(own)
			for _, f := range files {
				if data, err := os.ReadFile(filepath.Join(own, f.Name())); err == nil {
					os.WriteFile(filepath.Join(cover, f.Name()), data, 0o644)
				}
			}
		})
	}
	return env, tmp
}

// asNobody runs the binary as nobody with env.
func asNobody(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return asUser(t, nobodyUser, env, args...)
}

// asUser runs the binary as user u with env.
func asUser(t *testing.T, u plainUser, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(isolateBin, args...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred()}
	return runResult(t, cmd)
}

// rootlessRun is `isolate run --allow-rlimit-only --json ARGS` as nobody.
func rootlessRun(t *testing.T, env []string, args ...string) (*isolate.Report, int) {
	t.Helper()
	return rootlessRunAs(t, nobodyUser, env, args...)
}

// rootlessRunAs is `isolate run --allow-rlimit-only --json ARGS` as u.
func rootlessRunAs(t *testing.T, u plainUser, env []string, args ...string) (*isolate.Report, int) {
	t.Helper()
	res := asUser(t, u, env, append([]string{"run", "--allow-rlimit-only", "--json"}, args...)...)
	var rep isolate.Report
	if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
		t.Fatalf("isolate run %v as %s: exit %d, no JSON report (%v)\nstderr: %s", args, u.name, res.Code, err, res.Stderr)
	}
	if rep.Sandbox.Via != "in-process" {
		t.Fatalf("ran %q, want in-process", rep.Sandbox.Via)
	}
	return &rep, res.Code
}

// rootlessLeaks is rootlessLeaksOf nobody.
func rootlessLeaks(tmp, marker string) []string { return rootlessLeaksOf(nobodyUser, tmp, marker) }

// rootlessLeaksOf lists what user u's runs left: inits, the user's box
// processes (named by the marker in their command lines), exec's box
// directories, mounts of the user's runtime directory. marker "": no
// box process to look for by name.
func rootlessLeaksOf(u plainUser, tmp, marker string) []string {
	var leaks []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(p)
		// A user's init maps the user alone (root's map host uids of
		// their own: other runs on the host are not this test's).
		usersInit := bytes.Contains(cmdline, []byte(boxinit.InitArg)) && bytes.Contains(cmdline, []byte(" "+strconv.Itoa(u.uid)+" 1\n"))
		if usersInit || (marker != "" && bytes.Contains(cmdline, []byte(marker))) {
			leaks = append(leaks, "process "+filepath.Dir(p)+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	boxes, _ := filepath.Glob(filepath.Join(tmp, "isolate-*", "boxes", "*"))
	for _, b := range boxes {
		leaks = append(leaks, "box directory "+b)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, tmp) {
			leaks = append(leaks, "mount "+line)
		}
	}
	return leaks
}

// Without a delegated cgroup and without --allow-rlimit-only, a user's run
// is refused in one line that says why and how to fix it; nothing runs.
func TestRootlessRefusesWithoutDelegationOrRlimitOnly(t *testing.T) {
	needRoot(t)
	env, tmp := rootlessEnv(t)
	for _, cmd := range [][]string{{"run", "--", "/bin/true"}, {"exec", "--lang", "python", "/no/such.py"}} {
		res := asNobody(t, env, cmd...)
		lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
		if res.Code != 2 || len(lines) != 1 || res.Stdout != "" {
			t.Fatalf("%v: exit %d stdout %q stderr %q; want exit 2 and one line", cmd, res.Code, res.Stdout, res.Stderr)
		}
		for _, want := range []string{"no cgroup v2 subtree is delegated to you", "systemd-run --user --scope -p Delegate=yes isolate run", "--allow-rlimit-only"} {
			if !strings.Contains(lines[0], want) {
				t.Errorf("%v: %q does not say %q", cmd, lines[0], want)
			}
		}
	}
	// A named cgroup that is not a delegated one is refused too, even
	// with rlimits allowed: the caller asked for a cgroup.
	res := asNobody(t, env, "run", "--allow-rlimit-only", "--cgroup-root", "/sys/fs/cgroup", "--", "/bin/true")
	if res.Code != 2 || !strings.HasPrefix(res.Stderr, "isolate: --cgroup-root /sys/fs/cgroup: ") || strings.Count(res.Stderr, "\n") != 1 {
		t.Errorf("--cgroup-root /sys/fs/cgroup: exit %d stderr %q", res.Code, res.Stderr)
	}
	// CPU bandwidth cannot be limited without a cgroup: refused, not
	// dropped.
	res = asNobody(t, env, "run", "--allow-rlimit-only", "--cpus", "0.5", "--", "/bin/true")
	if res.Code != 2 || !strings.Contains(res.Stderr, "--cpus") || strings.Count(res.Stderr, "\n") != 1 {
		t.Errorf("--cpus without a cgroup: exit %d stderr %q", res.Code, res.Stderr)
	}
	// A squashfs image needs a loop device: refused up front.
	sqfs := filepath.Join(tmp, "image.sqfs")
	os.WriteFile(sqfs, []byte("hsqs"), 0o644)
	res = asNobody(t, env, "run", "--allow-rlimit-only", "--image", sqfs, "--", "/bin/true")
	if res.Code != 2 || !strings.Contains(res.Stderr, "needs root") || strings.Count(res.Stderr, "\n") != 1 {
		t.Errorf("a squashfs image: exit %d stderr %q", res.Code, res.Stderr)
	}
	if leaks := rootlessLeaks(tmp, "/no/such"); len(leaks) > 0 {
		t.Errorf("refused runs left %v", leaks)
	}
}

// A user's run with rlimits alone: the box is as root's (namespaces,
// read-only root, no capabilities, the filter), the verdicts are the
// same, and the report says per limit how it was enforced.
func TestRootlessRlimitOnly(t *testing.T) {
	needRoot(t)
	env, tmp := rootlessEnv(t)
	rep, code := rootlessRun(t, env, "--", "/bin/sh", "-c",
		`id -u; id -g; hostname; echo $$; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; `+
			`touch /usr/x 2>/dev/null && echo wrote-usr; touch /x 2>/dev/null && echo wrote-root; touch /box/f && echo wrote-box; `+
			`grep -c : /proc/net/dev; test -e /proc/1 || echo pid1-hidden`)
	expectStatus(t, rep, isolate.StatusOK)
	want := "1000\n1000\nisolate\n2\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nwrote-box\n1\npid1-hidden\n"
	if code != 0 || rep.Stdout != want {
		t.Errorf("inside the box: exit %d\n%s\nwant\n%s", code, rep.Stdout, want)
	}
	if rep.Sandbox.Cgroup != "none" {
		t.Errorf("sandbox.cgroup %q, want none", rep.Sandbox.Cgroup)
	}
	wantLimits := map[string]string{"memory": "rlimit", "memory_rlimit": "address-space", "pids": "rlimit", "cpu": "none", "cpus": "none", "wall": "supervisor"}
	if !sameMap(rep.Sandbox.Limits, wantLimits) {
		t.Errorf("sandbox.limits %v, want %v", rep.Sandbox.Limits, wantLimits)
	}

	cases := []struct {
		name   string
		args   []string
		status isolate.Status
		limit  string
		code   int
	}{
		{"RE", []string{"--", "/bin/sh", "-c", "exit 3"}, isolate.StatusRE, "", 1},
		{"SG", []string{"--", "/bin/sh", "-c", "kill -SEGV $$"}, isolate.StatusSG, "", 1},
		{"wall TO", []string{"-w", "0.3", "--", "/bin/sleep", "7.77"}, isolate.StatusTO, isolate.LimitWall, 1},
		{"CPU TO", []string{"-t", "1", "-w", "60", "--", "/bin/sh", "-c", "while :; do :; done"}, isolate.StatusTO, isolate.LimitCPU, 1},
	}
	for _, c := range cases {
		rep, code := rootlessRun(t, env, c.args...)
		expectStatus(t, rep, c.status)
		if code != c.code || rep.Limit != c.limit {
			t.Errorf("%s: exit %d limit %q, want %d %q", c.name, code, rep.Limit, c.code, c.limit)
		}
		if c.limit == isolate.LimitCPU {
			// RLIMIT_CPU counts the scheduler's samples; the report's
			// figure is the exact one, from init's rusage.
			if rep.CPUTime < 0.5 || rep.Sandbox.Limits["cpu"] != "rlimit" {
				t.Errorf("CPU TO: cpu_time %.3f, limits %v", rep.CPUTime, rep.Sandbox.Limits)
			}
		}
	}

	// pids: RLIMIT_NPROC counts the box's own tasks (its own user
	// namespace): a fork bomb stops at the limit, and two boxes of the
	// same user at once each get the whole limit.
	bomb := []string{"-p", "8", "--", "/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do /bin/sleep 5 & done; wait"}
	rep, _ = rootlessRun(t, env, bomb...)
	if rep.Status != isolate.StatusRE || !strings.Contains(rep.Stderr, "fork") {
		t.Errorf("fork bomb under -p 8: %s %q", rep.Status, rep.Stderr)
	}
	done := make(chan *isolate.Report, 2)
	for i := 0; i < 2; i++ {
		go func() {
			res := asNobody(t, env, "run", "--allow-rlimit-only", "--json", "-p", "8", "--", "/bin/sh", "-c", "for i in 1 2 3 4 5; do /bin/sleep 0.5 & done; wait")
			var r isolate.Report
			json.Unmarshal([]byte(res.Stdout), &r)
			done <- &r
		}()
	}
	for i := 0; i < 2; i++ {
		if r := <-done; r.Status != isolate.StatusOK {
			t.Errorf("two boxes of 6 tasks under -p 8 each: %s %q", r.Status, r.Stderr)
		}
	}

	// memory: RLIMIT_AS; an allocation over it fails (the program's own
	// verdict, RE here), never ML.
	rep, _ = rootlessRun(t, env, "-m", "64M", "--", "/bin/sh", "-c", "x=$(head -c 100000000 /dev/zero | tr '\\0' a); echo ${#x}")
	if rep.Status == isolate.StatusOK || rep.Status == isolate.StatusML || rep.Sandbox.Limits["memory"] != "rlimit" {
		t.Errorf("100 MB under -m 64M: %s %q limits %v", rep.Status, rep.Stderr, rep.Sandbox.Limits)
	}

	// The configuration's allow_rlimit_only allows it as the option does
	// (ISOLATE_CONFIG: a file of the user's, or the host's).
	cfg := filepath.Join(tmp, "config")
	os.WriteFile(cfg, []byte("allow_rlimit_only = 1\n"), 0o644)
	res := asNobody(t, append(env, "ISOLATE_CONFIG="+cfg), "run", "--json", "--", "/bin/true")
	var cr isolate.Report
	if json.Unmarshal([]byte(res.Stdout), &cr) != nil || cr.Status != isolate.StatusOK || cr.Sandbox.Limits["memory"] != "rlimit" {
		t.Errorf("allow_rlimit_only = 1: exit %d %s %s", res.Code, res.Stdout, res.Stderr)
	}

	// The summary line says the limits were rlimits.
	res = asNobody(t, env, "run", "--allow-rlimit-only", "--", "/bin/true")
	if res.Code != 0 || !strings.Contains(res.Stderr, " limits=rlimit") {
		t.Errorf("summary: exit %d %q", res.Code, res.Stderr)
	}
	if leaks := rootlessLeaks(tmp, "7.77"); len(leaks) > 0 {
		t.Errorf("the user's runs left %v", leaks)
	}
}

// Files in and out of a user's box are the user's own, and a user's run
// of exec shares its /box between the phases in the user's directory,
// removed afterwards: for nobody (uid = gid, no subordinate ids) and for
// a user made as useradd makes them (a primary group of another number,
// subordinate ids).
func TestRootlessFilesAndExec(t *testing.T) {
	needRoot(t)
	t.Run("nobody", func(t *testing.T) { rootlessFilesAndExec(t, nobodyUser) })
	t.Run("uid-not-gid", func(t *testing.T) { rootlessFilesAndExec(t, splitUser(t)) })
}

func rootlessFilesAndExec(t *testing.T, u plainUser) {
	env, tmp := rootlessEnvOf(t, u)
	dir := filepath.Join(tmp, "files")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "in.txt"), []byte("hello\n"), 0o644)
	os.Chown(dir, u.uid, u.gid)
	out := filepath.Join(dir, "out.txt")
	rep, _ := rootlessRunAs(t, u, env, "--copy-in", filepath.Join(dir, "in.txt")+":/box/in.txt", "--copy-out", "/box/out.txt:"+out,
		"--", "/bin/sh", "-c", "tr a-z A-Z < in.txt > out.txt")
	expectStatus(t, rep, isolate.StatusOK)
	var st syscall.Stat_t
	if data, err := os.ReadFile(out); err != nil || string(data) != "HELLO\n" || syscall.Stat(out, &st) != nil || int(st.Uid) != u.uid || int(st.Gid) != u.gid {
		t.Errorf("copy-out: %q %v (owner %d:%d)", data, err, st.Uid, st.Gid)
	}

	// The host's compilers and interpreters (--image host): the same
	// whatever images this host has built, a compiled language among
	// them, whose two phases share /box.
	sources := map[string]string{"python": "print(6*7)\n", "c": "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 6*7); return 0; }\n"}
	for lang, text := range sources {
		src := filepath.Join(dir, "a."+map[string]string{"python": "py", "c": "c"}[lang])
		os.WriteFile(src, []byte(text), 0o644)
		res := asUser(t, u, env, "exec", "--allow-rlimit-only", "--json", "--image", "host", "--lang", lang, src)
		var er struct {
			Status  string
			Compile *isolate.Report
			Run     *isolate.Report
		}
		if err := json.Unmarshal([]byte(res.Stdout), &er); err != nil || er.Status != "OK" || er.Run == nil || er.Run.Stdout != "42\n" ||
			(lang == "c") != (er.Compile != nil) {
			t.Errorf("exec --lang %s as %s: exit %d %s %s", lang, u.name, res.Code, res.Stdout, res.Stderr)
		}
	}
	// A bind of the user's own directory: bound by init, in the user's
	// namespaces; a kernel interface or a directory the user cannot read
	// is refused as it is for root's callers.
	rep, _ = rootlessRunAs(t, u, env, "--bind", dir+":/data", "--", "/bin/cat", "/data/in.txt")
	expectStatus(t, rep, isolate.StatusOK)
	if rep.Stdout != "hello\n" {
		t.Errorf("--bind of the user's directory: %q", rep.Stdout)
	}
	for _, src := range []string{"/proc", "/root"} {
		if res := asUser(t, u, env, "run", "--allow-rlimit-only", "--bind", src+":/data", "--", "/bin/true"); res.Code != 2 {
			t.Errorf("--bind %s as %s: exit %d %s", src, u.name, res.Code, res.Stderr)
		}
	}
	if leaks := rootlessLeaksOf(u, tmp, ""); len(leaks) > 0 {
		t.Errorf("exec left %v", leaks)
	}
}

// Root's runs are as before: --allow-rlimit-only changes nothing for root
// (a permission root does not need), --cgroup-root is refused, the report
// has no sandbox.limits.
func TestRootlessOptionsAsRoot(t *testing.T) {
	needRoot(t)
	rep, code := runBox(t, "--allow-rlimit-only", "-m", "64M", "--", "/bin/true")
	expectStatus(t, rep, isolate.StatusOK)
	if code != 0 || rep.Sandbox.Limits != nil || rep.Sandbox.Cgroup == "none" || rep.MemoryPeak == 0 {
		t.Errorf("root with --allow-rlimit-only: exit %d cgroup %q limits %v memory_peak %d", code, rep.Sandbox.Cgroup, rep.Sandbox.Limits, rep.MemoryPeak)
	}
	res := isolateCmd(t, "", "run", "--cgroup-root", "/sys/fs/cgroup", "--", "/bin/true")
	if res.Code != 2 || !strings.HasPrefix(res.Stderr, "isolate: --cgroup-root is for a run without root") {
		t.Errorf("root with --cgroup-root: exit %d %q", res.Code, res.Stderr)
	}
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// `isolate check` as a user who is not root runs a box of the user's and
// says how the limits would be enforced here and how to get the rest.
func TestRootlessCheck(t *testing.T) {
	needRoot(t)
	env, tmp := rootlessEnv(t)
	res := asNobody(t, env, "check")
	if res.Code != 0 {
		t.Fatalf("check as nobody: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	wants := []string{"\nok   box ", "\nnote limits ", "--allow-rlimit-only", "`systemd-run --user --scope -p Delegate=yes isolate run ...`"}
	switch {
	case strings.Contains(res.Stdout, "\nok   box user "):
		// nobody has subordinate ids on this host (TestRootlessSubordinateIDs).
	case strings.Contains(res.Stdout, "no range for nobody"):
		wants = append(wants, "no separate uid per box", "\nnote box user ", " | tee -a /etc/subuid /etc/subgid`")
	default:
		wants = append(wants, "no separate uid per box", "\nnote box user ")
	}
	for _, want := range wants {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("check as nobody does not say %q:\n%s", want, res.Stdout)
		}
	}
	if leaks := rootlessLeaks(tmp, ""); len(leaks) > 0 {
		t.Errorf("check left %v", leaks)
	}
}

// A user's supervisor killed by SIGKILL takes its box down: the program
// dies with it, and no init of the user's stays.
func TestRootlessKilledSupervisor(t *testing.T) {
	needRoot(t)
	env, tmp := rootlessEnv(t)
	const marker = "77.123"
	cmd := exec.Command(isolateBin, "run", "--allow-rlimit-only", "--", "/bin/sleep", marker)
	cmd.Env, cmd.Dir = env, "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	running := func() bool {
		for _, l := range rootlessLeaks(tmp, marker) {
			if strings.Contains(l, ": /bin/sleep "+marker) { // the program, not its supervisor
				return true
			}
		}
		return false
	}
	waitFor(t, "the program to run", running)
	cmd.Process.Kill()
	cmd.Wait()
	waitFor(t, "the box to go with its supervisor", func() bool { return len(rootlessLeaks(tmp, marker)) == 0 })
}

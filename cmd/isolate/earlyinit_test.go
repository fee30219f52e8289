package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
)

// inProcess runs isolate with args in-process (never handed to a
// service), as root's CLI does where no service runs.
func inProcess(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(isolateBin, args...)
	cmd.Env = append(os.Environ(), "ISOLATE_NO_SERVICE=1")
	if dir := os.Getenv("ISOLATE_COVERDIR"); dir != "" {
		cmd.Env = append(cmd.Env, "GOCOVERDIR="+dir)
	}
	return runResult(t, cmd)
}

// TestInitStartedBeforeGo: an in-process run of root's takes the init
// the command forked before the Go runtime started (stage early-init);
// a run with the host's network, which that init's namespaces do not
// fit, spawns its own. Both run and account as usual.
func TestInitStartedBeforeGo(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		args  []string
		early bool
	}{
		{nil, true},
		{[]string{"--mem", "64M", "--pids", "8", "--stdin", "/etc/hostname"}, true},
		{[]string{"--net", "host"}, false},
	} {
		args := append(append([]string{"run", "--json"}, tc.args...), "--", "/bin/sh", "-c",
			"cat; grep -c . /proc/self/status >/dev/null; echo out; echo err >&2")
		res := inProcess(t, args...)
		var rep isolate.Report
		if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
			t.Fatalf("%v: exit %d, no report: %v\n%s", tc.args, res.Code, err, res.Stderr)
		}
		expectStatus(t, &rep, isolate.StatusOK)
		if !strings.HasSuffix(rep.Stdout, "out\n") || rep.Stderr != "err\n" {
			t.Errorf("%v: stdout %q, stderr %q", tc.args, rep.Stdout, rep.Stderr)
		}
		_, early := rep.Sandbox.Stages["early-init"]
		_, spawned := rep.Sandbox.Stages["spawn"]
		if early != tc.early || spawned == tc.early {
			t.Errorf("%v: early init taken %v, spawned %v; want early %v (stages %v)", tc.args, early, spawned, tc.early, rep.Sandbox.Stages)
		}
		if rep.CPUTime <= 0 || rep.MemoryPeak <= 0 {
			t.Errorf("%v: not accounted: cpu %v, memory %v", tc.args, rep.CPUTime, rep.MemoryPeak)
		}
	}
}

// TestEarlyInitEndsWithTheCommand: a command that runs no box (bad
// usage, an unknown language, a box never initialised) ends the init
// forked for it before it exits: nothing of it is left to be reaped by
// another.
func TestEarlyInitEndsWithTheCommand(t *testing.T) {
	needRoot(t)
	for _, args := range [][]string{
		{"run", "--time", "abc", "--", "/bin/true"},
		{"run", "--mem", "NaN", "--", "/bin/true"},
		{"exec", "--lang", "no-such-language", "--", "x"},
		{"--box-id=99999999", "--run", "--", "/bin/true"},
		{"run", "--", "/bin/true"},
	} {
		code, orphans := orphansOf(t, args)
		if (code == 0) != (args[0] == "run" && args[1] == "--") {
			t.Errorf("%v: exit %d", args, code)
		}
		if orphans != 0 {
			t.Errorf("%v (exit %d): %d processes outlived it", args, code, orphans)
		}
	}
}

// orphansEnv has this test binary run isolate as a child subreaper
// (orphansHelper, from TestMain): the arguments, joined by \x1f.
const orphansEnv = "ISOLATE_TEST_ORPHANS_OF"

// orphansOf runs isolate with args in-process under a helper that
// adopts what it leaves behind: its exit status and how many processes
// outlived it.
func orphansOf(t *testing.T, args []string) (code, orphans int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), orphansEnv+"="+strings.Join(args, "\x1f"), "ISOLATE_BIN="+isolateBin, "ISOLATE_NO_SERVICE=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	if _, err := fmt.Sscan(string(out), &code, &orphans); err != nil {
		t.Fatalf("helper said %q", out)
	}
	return code, orphans
}

// orphansHelper runs isolate as orphansOf asks, prints its exit status
// and the number of processes it left (which became this process's
// children), and exits.
func orphansHelper() {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Println(-1, -1)
		os.Exit(1)
	}
	cmd := exec.Command(os.Getenv("ISOLATE_BIN"), strings.Split(os.Getenv(orphansEnv), "\x1f")...)
	cmd.Run()
	code := cmd.ProcessState.ExitCode()
	orphans := 0
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, 0, nil); err == syscall.EINTR {
			continue
		} else if err != nil {
			break
		}
		orphans++
	}
	fmt.Println(code, orphans)
	os.Exit(0)
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
)

// TestCallersCPUsReachTheProgram: isolate boots its Go runtime on one CPU
// (procs.c) and must hand the caller's affinity back to every thread of
// the supervisor, and so to the program, whatever that affinity is.
func TestCallersCPUsReachTheProgram(t *testing.T) {
	needRoot(t)
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	if all.Count() < 2 {
		t.Skip("one CPU: nothing is narrowed")
	}
	var last unix.CPUSet
	for c := 0; c < len(all)*64; c++ {
		if all.IsSet(c) {
			last.Zero()
			last.Set(c)
		}
	}
	for _, tc := range []struct {
		name string
		set  *unix.CPUSet
	}{{"all the test's CPUs", &all}, {"one CPU (taskset-like)", &last}} {
		t.Run(tc.name, func(t *testing.T) {
			want := cpuList(tc.set)
			// The program prints its affinity and sleeps until the wall
			// limit, while the test looks at the supervisor's threads.
			cmd := exec.Command(isolateBin, append(append([]string{"run", "--json", "--wall-time", "1"}, probe(t)...), "--", "/bin/sh", "-c",
				"grep Cpus_allowed_list /proc/self/status; exec /t/probe sleep 100")...)
			cmd.Env = os.Environ()
			out := &strings.Builder{}
			cmd.Stdout = out
			startWithCPUs(t, cmd, tc.set)
			var threads []string
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if threads = threadCPUs(cmd.Process.Pid); len(threads) > 0 && runsProgram(cmd.Process.Pid, "probe") {
					break
				}
			}
			if err := cmd.Wait(); err != nil && cmd.ProcessState.ExitCode() != 1 {
				t.Fatalf("isolate: %v", err)
			}
			if len(threads) == 0 {
				t.Fatal("no threads of the supervisor found")
			}
			for _, th := range threads {
				if !strings.HasSuffix(th, "\t"+want) {
					t.Errorf("supervisor thread %s, want %s", th, want)
				}
			}
			var rep isolate.Report
			if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
				t.Fatalf("no report: %v\n%s", err, out)
			}
			expectStatus(t, &rep, isolate.StatusTO)
			if !strings.Contains(rep.Stdout, "Cpus_allowed_list:\t"+want+"\n") {
				t.Errorf("the program saw another affinity than the caller's %s: %q", want, rep.Stdout)
			}
		})
	}
}

// startWithCPUs starts cmd from a thread whose affinity is set, as
// taskset does: the child inherits it.
func startWithCPUs(t *testing.T, cmd *exec.Cmd, set *unix.CPUSet) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var mine unix.CPUSet
	unix.SchedGetaffinity(0, &mine)
	if err := unix.SchedSetaffinity(0, set); err != nil {
		t.Fatal(err)
	}
	err := cmd.Start()
	unix.SchedSetaffinity(0, &mine)
	if err != nil {
		t.Fatal(err)
	}
}

// threadCPUs lists "TID\tCPULIST" for each thread of pid.
func threadCPUs(pid int) []string {
	var out []string
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, p := range tasks {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:\t"); ok {
				out = append(out, filepath.Base(filepath.Dir(p))+"\t"+v)
			}
		}
	}
	return out
}

// runsProgram tells whether a descendant of pid runs the executable
// named comm (the program, not init: init may be started before Go).
func runsProgram(pid int, comm string) bool {
	parent := map[int]int{}
	names := map[int]string{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		d, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		open, close := strings.IndexByte(string(d), '('), strings.LastIndexByte(string(d), ')')
		if open < 0 || close < open {
			continue
		}
		var id, ppid int
		var state string
		fmt.Sscan(string(d[:open]), &id)
		fmt.Sscan(string(d[close+1:]), &state, &ppid)
		parent[id], names[id] = ppid, string(d[open+1:close])
	}
	for id, name := range names {
		if name != comm {
			continue
		}
		for p, hops := parent[id], 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if p == pid {
				return true
			}
		}
	}
	return false
}

// cpuList formats set as the kernel's Cpus_allowed_list does.
func cpuList(set *unix.CPUSet) string {
	var parts []string
	n := len(set) * 64
	for c := 0; c < n; c++ {
		if !set.IsSet(c) {
			continue
		}
		end := c
		for end+1 < n && set.IsSet(end+1) {
			end++
		}
		if end == c {
			parts = append(parts, fmt.Sprint(c))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", c, end))
		}
		c = end
	}
	return strings.Join(parts, ",")
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const mib = 1 << 20

// cgroupRoot is the cgroup2 mount; boxes live in isolate/ below the cgroup
// of the supervisor, which the guest init leaves in the root.
const cgroupRoot = "/sys/fs/cgroup"

var boxesDir = filepath.Join(cgroupRoot, "isolate")

// environment prints what the kernel offers and checks it is cgroup2 only.
func (d *driver) environment() {
	fmt.Printf("kernel: %s\n", readTrim("/proc/sys/kernel/osrelease"))
	fmt.Printf("driver cgroup: %s\n", readTrim("/proc/self/cgroup"))
	fmt.Printf("controllers (root cgroup.controllers): %s\n", readTrim(filepath.Join(cgroupRoot, "cgroup.controllers")))
	fmt.Printf("enabled for children (root cgroup.subtree_control): %s\n", readTrim(filepath.Join(cgroupRoot, "cgroup.subtree_control")))
	mounts, _ := os.ReadFile("/proc/self/mounts")
	var v1, v2 []string
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		switch f[2] {
		case "cgroup":
			v1 = append(v1, f[1])
		case "cgroup2":
			v2 = append(v2, f[1])
		}
	}
	d.check("cgroup2 only", len(v1) == 0 && len(v2) == 1 && v2[0] == cgroupRoot,
		"cgroup2 mounts %v, v1 mounts %v", v2, v1)
}

// isolateCheck shows `isolate check` as a user on a v2 host sees it.
func (d *driver) isolateCheck() {
	out, errs, code, err := d.isolate("check")
	fmt.Println("isolate check:")
	for _, line := range strings.Split(strings.TrimRight(out+errs, "\n"), "\n") {
		fmt.Println("  | " + line)
	}
	d.check("isolate check", err == nil && code == 0 && strings.Contains(out, "v2, boxes under"),
		"exit %d, reports cgroups v2 usable (%v)", code, err)
}

// trueRun: the simplest run works on v2 and its figures come from v2 files.
func (d *driver) trueRun() {
	r := d.run("--", "/bin/true")
	if !d.expect("/bin/true", r, "OK") {
		return
	}
	rep := r.rep
	d.check("/bin/true", rep.Sandbox.Cgroup == "v2" && rep.PidsPeak == 1 && rep.MemoryPeak > 0 && rep.MemoryPeak < 2*mib && r.code == 0,
		"sandbox.cgroup %s, pids_peak %d, memory_peak %d B (want v2, 1, under 2 MiB), setup %.1f ms, teardown %.1f ms",
		rep.Sandbox.Cgroup, rep.PidsPeak, rep.MemoryPeak, rep.Sandbox.SetupTime*1000, rep.Sandbox.TeardownTime*1000)
}

// placement: the program runs in its box's cgroup, not in the
// supervisor's.
func (d *driver) placement() {
	r := d.run("--", "/bin/cat", "/proc/self/cgroup")
	if !d.expect("placement", r, "OK") {
		return
	}
	want := fmt.Sprintf("0::/isolate/box-%d", r.rep.BoxID)
	d.check("placement", strings.TrimSpace(r.rep.Stdout) == want, "program's /proc/self/cgroup %q, want %q",
		strings.TrimSpace(r.rep.Stdout), want)
}

// limitFiles reads a running box's v2 limit files and its members: only
// the program, none of the sandbox's own processes.
func (d *driver) limitFiles() {
	const id = 7
	cmd, err := d.start("--box-id", strconv.Itoa(id), "--mem", "100M", "--pids", "20", "--cpus", "0.5",
		"--bind", d.probeDir+":/t", "--", "/t/probe", "sleep", "2")
	if err != nil {
		d.check("limit files", false, "start: %v", err)
		return
	}
	dir := filepath.Join(boxesDir, "box-"+strconv.Itoa(id))
	running := waitFor(20*time.Second, func() bool { return len(boxProcesses(id)) > 0 })
	fmt.Printf("enabled for boxes (isolate/cgroup.subtree_control): %s\n", readTrim(filepath.Join(boxesDir, "cgroup.subtree_control")))
	procs := strings.Fields(readTrim(filepath.Join(dir, "cgroup.procs")))
	var uids []string
	for _, p := range procs {
		for _, line := range strings.Split(readTrim("/proc/"+p+"/status"), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				uids = append(uids, f[1])
			}
		}
	}
	got := map[string]string{}
	for _, f := range []string{"memory.max", "memory.swap.max", "pids.max", "cpu.max"} {
		got[f] = readTrim(filepath.Join(dir, f))
	}
	cmd.Wait()
	want := map[string]string{"memory.max": strconv.Itoa(100 * mib), "pids.max": "20", "cpu.max": "50000 100000"}
	if got["memory.swap.max"] != "" { // present with swap accounting
		want["memory.swap.max"] = "0"
	}
	ok := running
	for f, v := range want {
		ok = ok && got[f] == v
	}
	d.check("limit files", ok, "memory.max %s, memory.swap.max %s, pids.max %s, cpu.max %q (want %s, 0, 20, \"50000 100000\")",
		got["memory.max"], got["memory.swap.max"], got["pids.max"], got["cpu.max"], want["memory.max"])
	progUID := strconv.Itoa(firstUID + id)
	d.check("only the program in box", running && len(uids) == 1 && uids[0] == progUID,
		"cgroup.procs %v with uids %v while running (want the program alone, uid %s)", procs, uids, progUID)
}

// memory: exact peak, and the OOM killer acting in the box is ML.
func (d *driver) memory() {
	r := d.probe([]string{"--mem", "300M"}, "touch", "200")
	if d.expect("memory peak", r, "OK") {
		p := float64(r.rep.MemoryPeak) / mib
		d.check("memory peak", p >= 200 && p <= 206, "200 MiB touched: memory_peak %.2f MiB (want 200-206)", p)
	}
	r = d.probe([]string{"--mem", "64M"}, "touch", "200")
	if d.expect("memory limit (ML)", r, "ML") {
		p := float64(r.rep.MemoryPeak) / mib
		d.check("memory limit (ML)", r.rep.OOMKilled && r.code == 1 && p <= 64,
			"200 MiB under --mem 64M: ML, oom_killed %v, exit %d, memory_peak %.2f MiB", r.rep.OOMKilled, r.code, p)
	}
	// The parent as another process leaves it between making it and
	// enabling the box controllers in it (boxes built ahead at a
	// service's start race so): a box made there enables them and is
	// made again, its limit enforced.
	parent := filepath.Join(cgroupRoot, "isolate")
	if err := os.Mkdir(parent, 0o755); err != nil {
		d.check("memory limit, parent without controllers", false, "mkdir %s: %v", parent, err)
		return
	}
	r = d.probe([]string{"--mem", "64M"}, "touch", "200")
	if d.expect("memory limit, parent without controllers", r, "ML") {
		d.check("memory limit, parent without controllers", r.rep.OOMKilled, "200 MiB under --mem 64M: oom_killed %v", r.rep.OOMKilled)
	}
	syscall.Rmdir(parent)
}

// pids: a fork bomb stops at the limit, pids_peak counts it exactly, and
// nothing of it outlives the run.
func (d *driver) pids() {
	r := d.probe([]string{"--pids", "10"}, "forkbomb")
	if d.expect("pids limit", r, "OK") {
		n, _ := strconv.Atoi(strings.TrimSpace(r.rep.Stdout))
		d.check("pids limit", n == 9 && r.rep.PidsPeak == 10, "fork bomb under --pids 10: %d children, pids_peak %d (want 9 and 10)", n, r.rep.PidsPeak)
	}
	left := boxProcesses(-1)
	d.check("fork bomb cleaned up", len(left) == 0, "box processes left after the run: %v", left)
}

// daemon: a detached (setsid, double fork) sleeper dies with the run and
// the run does not wait for it.
func (d *driver) daemon() {
	r := d.probe([]string{"--wall-time", "5"}, "daemon")
	if d.expect("daemon cleaned up", r, "OK") {
		left := boxProcesses(-1)
		d.check("daemon cleaned up", r.rep.WallTime < 2 && len(left) == 0,
			"wall_time %.3f (want < 2: not waited for), box processes left %v", r.rep.WallTime, left)
	}
}

// killedSupervisor: a supervisor killed by SIGKILL takes its box down, and
// the next run removes the cgroup it left.
func (d *driver) killedSupervisor() {
	const id = 9
	cmd, err := d.start("--box-id", strconv.Itoa(id), "--bind", d.probeDir+":/t", "--", "/t/probe", "sleep", "100")
	if err != nil {
		d.check("supervisor killed", false, "start: %v", err)
		return
	}
	running := waitFor(20*time.Second, func() bool { return len(boxProcesses(id)) > 0 })
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	gone := waitFor(10*time.Second, func() bool { return len(boxProcesses(id)) == 0 })
	dir := filepath.Join(boxesDir, "box-"+strconv.Itoa(id))
	_, statErr := os.Stat(dir)
	left := statErr == nil
	d.check("supervisor killed", running && gone, "program running %v, gone after SIGKILL of its supervisor %v (cgroup left: %v)", running, gone, left)
	r := d.run("--", "/bin/true")
	if d.expect("stale cgroup removed", r, "OK") {
		_, err := os.Stat(dir)
		d.check("stale cgroup removed", os.IsNotExist(err), "%s after the next run: %v", dir, err)
	}
}

// noLeftovers: after all runs, no box cgroup, not even the isolate
// directory that held them, and no box process.
func (d *driver) noLeftovers() {
	var cgroups []string
	ents, _ := os.ReadDir(boxesDir)
	for _, e := range ents {
		if e.IsDir() {
			cgroups = append(cgroups, e.Name())
		}
	}
	_, err := os.Stat(boxesDir)
	procs := boxProcesses(-1)
	d.check("no leftovers", os.IsNotExist(err) && len(procs) == 0,
		"%s: %v, cgroups in it: %v, box processes: %v", boxesDir, err, cgroups, procs)
}

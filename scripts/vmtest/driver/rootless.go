package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A user who is not root, each run in a scope delegated to it as
// `systemd-run --user --scope -p Delegate=yes isolate run ...` makes one:
// the scope offers cpu, memory and pids, and the user owns its directory
// and its cgroup.procs, cgroup.subtree_control and cgroup.threads.
const userUID = 1000

var userParent = filepath.Join(cgroupRoot, "rootless.slice")

// rootless: a user's runs, with the limits of a cgroup delegated to it.
func (d *driver) rootless() {
	defer syscall.Rmdir(userParent)
	if err := os.Mkdir(userParent, 0o755); err != nil {
		d.check("rootless: delegated scope", false, "set up: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(userParent, "cgroup.subtree_control"), []byte("+cpu +memory +pids"), 0); err != nil {
		d.check("rootless: delegated scope", false, "enable controllers in %s: %v", userParent, err)
		return
	}
	// Outside a delegated cgroup (the driver's own, root's): refused,
	// with the fix.
	r := d.runAsUser(false, "--", "/bin/true")
	d.check("rootless: refused undelegated", r.rep == nil && r.code == 2 && strings.Contains(r.errs, "systemd-run --user --scope -p Delegate=yes"),
		"exit %d, %q", r.code, r.errs)

	// isolate check, as the user in its scope: the cgroup's limits, and a
	// box of the user's.
	cr, out := d.asUser(true, "check")
	d.check("rootless: isolate check", cr.err == nil && cr.code == 0 && strings.Contains(string(out), "ok   limits") &&
		strings.Contains(string(out), "delegated to you") && strings.Contains(string(out), "ok   box"), "exit %d (%v):\n%s%s", cr.code, cr.err, out, cr.errs)

	r = d.runAsUser(true, "--", "/bin/cat", "/proc/self/cgroup")
	if !d.expect("rootless: OK", r.run, "OK") {
		fmt.Printf("stderr: %s\n", r.errs)
		return
	}
	rep := r.rep
	want := fmt.Sprintf("0::%s/isolate/box-%d", strings.TrimPrefix(r.scope, cgroupRoot), rep.BoxID)
	d.check("rootless: OK", strings.TrimSpace(rep.Stdout) == want && rep.Sandbox.Cgroup == "v2" && rep.Sandbox.Limits["memory"] == "cgroup" &&
		rep.Sandbox.Limits["pids"] == "cgroup" && rep.PidsPeak == 1 && rep.MemoryPeak > 0 && rep.MemoryPeak < 2*mib,
		"program in %q (want %q), sandbox.cgroup %s, limits %v, pids_peak %d, memory_peak %d B",
		strings.TrimSpace(rep.Stdout), want, rep.Sandbox.Cgroup, rep.Sandbox.Limits, rep.PidsPeak, rep.MemoryPeak)

	r = d.runAsUser(true, "--", "/bin/sh", "-c", "exit 3")
	d.check("rootless: RE", outcome(r.run, "RE") == "" && r.code == 1 && r.rep.ExitCode == 3, "exit 3: %s", userSummary(r))
	r = d.runAsUser(true, "--", "/bin/sh", "-c", "kill -SEGV $$")
	d.check("rootless: SG", outcome(r.run, "SG") == "" && r.rep.Signal == 11, "kill -SEGV $$: %s", userSummary(r))
	r = d.runAsUser(true, "--wall-time", "0.3", "--bind", d.probeDir+":/t", "--", "/t/probe", "sleep", "5")
	d.check("rootless: TO wall", outcome(r.run, "TO") == "" && r.rep.Limit == "wall", "--wall-time 0.3 on a sleeper: %s", userSummary(r))

	d.userLimits("rootless")
	d.measured("rootless: cpu accounting", func() (bool, string) {
		r := d.runAsUser(true, "--bind", d.probeDir+":/t", "--", "/t/probe", "spin", "0.5")
		if o := outcome(r.run, "OK"); o != "" {
			return false, o
		}
		own, _ := strconv.ParseFloat(strings.TrimSpace(r.rep.Stdout), 64)
		rel := 1.0
		if own > 0 {
			rel = (r.rep.CPUTime - own) / own
		}
		return r.rep.CPUTime >= 0.49 && r.rep.CPUTime <= 0.52 && rel < 0.02 && rel > -0.02,
			fmt.Sprintf("0.5 s spin: cpu_time %.4f, program's own %.4f (want 0.49-0.52, within 2%%)", r.rep.CPUTime, own)
	})

	procs := processesOf(userUID, userUID)
	d.check("rootless: nothing left", len(procs) == 0 && len(d.userLeft) == 0,
		"the user's processes %v; in its scopes: %v", procs, d.userLeft)
	d.subordinateIDs()
}

// The user's subordinate range, as `echo vmuser:200000:65536 | tee -a
// /etc/subuid /etc/subgid` gives it.
const subStart, subCount = 200000, 65536

// subordinateIDs: the user's runs once it has a subordinate range (and
// the image has uidmap's tools): the box user is the range's N-th id for
// box id N, inside the same delegated scope, with every limit and the
// accounting as before, and nothing left of either uid.
func (d *driver) subordinateIDs() {
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		if err := os.WriteFile(f, []byte(fmt.Sprintf("vmuser:%d:%d\n", subStart, subCount)), 0o644); err != nil {
			d.check("subids: OK", false, "set up: %v", err)
			return
		}
		defer os.Remove(f)
	}
	rw := "/tmp/subids-rw"
	if err := os.Mkdir(rw, 0o777); err != nil {
		d.check("subids: OK", false, "set up: %v", err)
		return
	}
	defer os.RemoveAll(rw)
	os.Chmod(rw, 0o777)
	os.Chown(rw, userUID, userUID)

	const box = 5
	r := d.runAsUser(true, "--box-id", strconv.Itoa(box), "--bind", rw+":/box/rw:rw", "--",
		"/bin/sh", "-c", "id -u; id -G; touch /box/rw/made; cat /proc/self/cgroup")
	if !d.expect("subids: OK", r.run, "OK") {
		fmt.Printf("stderr: %s\n", r.errs)
		return
	}
	var st syscall.Stat_t
	made := syscall.Lstat(filepath.Join(rw, "made"), &st)
	lines := strings.Split(strings.TrimSpace(r.rep.Stdout), "\n")
	want := fmt.Sprintf("0::%s/isolate/box-%d", strings.TrimPrefix(r.scope, cgroupRoot), box)
	d.check("subids: OK", made == nil && int(st.Uid) == subStart+box && int(st.Gid) == subStart+box &&
		r.rep.Sandbox.User == "subordinate" && len(lines) == 3 && lines[0] == "1000" && lines[1] == "1000" && lines[2] == want &&
		r.rep.Sandbox.Limits["memory"] == "cgroup" && r.rep.PidsPeak >= 2 && r.rep.MemoryPeak > 0,
		"sandbox.user %q, inside %q (want uid and groups 1000, cgroup %s), a file made on the host by %d:%d (%v; want %d), limits %v, pids_peak %d, memory_peak %d B",
		r.rep.Sandbox.User, lines, want, st.Uid, st.Gid, made, subStart+box, r.rep.Sandbox.Limits, r.rep.PidsPeak, r.rep.MemoryPeak)

	d.userLimits("subids")
	procs := append(processesOf(userUID, userUID), processesOf(subStart, subStart+subCount-1)...)
	d.check("subids: nothing left", len(procs) == 0 && len(d.userLeft) == 0,
		"processes of the user or its range %v; in its scopes: %v", procs, d.userLeft)
}

// userLimits: the user's runs in a delegated scope, under each limit: ML
// under --mem 64M, a fork bomb under --pids 10, TO under --time 0.3.
// Each check's name starts with prefix.
func (d *driver) userLimits(prefix string) {
	r := d.runAsUser(true, "--mem", "64M", "--bind", d.probeDir+":/t", "--", "/t/probe", "touch", "200")
	if d.expect(prefix+": ML", r.run, "ML") {
		d.check(prefix+": ML", r.rep.OOMKilled && float64(r.rep.MemoryPeak)/mib <= 64, "200 MiB under --mem 64M: oom_killed %v, memory_peak %.2f MiB",
			r.rep.OOMKilled, float64(r.rep.MemoryPeak)/mib)
	}
	r = d.runAsUser(true, "--pids", "10", "--bind", d.probeDir+":/t", "--", "/t/probe", "forkbomb")
	if d.expect(prefix+": fork bomb", r.run, "OK") {
		n, _ := strconv.Atoi(strings.TrimSpace(r.rep.Stdout))
		d.check(prefix+": fork bomb", n == 9 && r.rep.PidsPeak == 10, "under --pids 10: %d children, pids_peak %d (want 9 and 10)", n, r.rep.PidsPeak)
	}
	d.measured(prefix+": cpu limit", func() (bool, string) {
		r := d.runAsUser(true, "--time", "0.3", "--bind", d.probeDir+":/t", "--", "/t/probe", "forever")
		if o := outcome(r.run, "TO"); o != "" {
			return false, o
		}
		return r.rep.Limit == "cpu" && r.rep.CPUTime >= 0.3 && r.rep.CPUTime <= 0.32,
			fmt.Sprintf("--time 0.3: TO %s at cpu_time %.4f (want cpu, 0.30-0.32)", r.rep.Limit, r.rep.CPUTime)
	})
}

// userRun is a run of the user's: its report (nil if none), exit status,
// standard error and the scope it ran in.
type userRun struct {
	run
	errs  string
	scope string
}

// runAsUser runs `isolate run --json ARGS` as the user: in a scope of its
// own delegated to the user, or in the driver's cgroup. After the run,
// the scope must hold nothing but the empty leaf isolate moved itself to
// (what else is there goes to d.userLeft); it is then removed, as systemd
// removes an ended scope.
func (d *driver) runAsUser(delegated bool, args ...string) userRun {
	r, out := d.asUser(delegated, append([]string{"run", "--json"}, args...)...)
	if r.err != nil {
		return r
	}
	var rep report
	if json.Unmarshal(out, &rep) != nil {
		r.err = fmt.Errorf("exit %d, no report: %s", r.code, r.errs)
		return r
	}
	r.rep = &rep
	return r
}

// asUser runs isolate with args as the user (see runAsUser) and returns
// its standard output.
func (d *driver) asUser(delegated bool, args ...string) (userRun, []byte) {
	cmd := exec.Command(d.bin, args...)
	cmd.Env = []string{"PATH=/bin", "TMPDIR=/tmp", "ISOLATE_NO_SERVICE=1"}
	cmd.Dir = "/"
	attr := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: userUID, Gid: userUID}}
	var scope string
	if delegated {
		d.scopes++
		scope = filepath.Join(userParent, fmt.Sprintf("run-u%d.scope", d.scopes))
		if err := makeUserScope(scope); err != nil {
			return userRun{run: run{err: err}}, nil
		}
		defer d.endUserScope(scope)
		f, err := os.Open(scope)
		if err != nil {
			return userRun{run: run{err: err}}, nil
		}
		defer f.Close()
		attr.UseCgroupFD, attr.CgroupFD = true, int(f.Fd())
	}
	cmd.SysProcAttr = attr
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := userRun{errs: strings.TrimSpace(errb.String()), scope: scope}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		r.err = err
	}
	return r, out.Bytes()
}

// userSummary describes a user's run for a result line.
func userSummary(r userRun) string {
	if r.rep == nil {
		return fmt.Sprintf("no report (%v)", r.err)
	}
	return fmt.Sprintf("%s limit %q exit_code %d signal %d, isolate's exit %d", r.rep.Status, r.rep.Limit, r.rep.ExitCode, r.rep.Signal, r.code)
}

// makeUserScope makes a scope delegated to the user, as systemd does.
func makeUserScope(scope string) error {
	if err := os.Mkdir(scope, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
		if err := os.Chown(filepath.Join(scope, f), userUID, userUID); err != nil {
			return err
		}
	}
	return nil
}

// endUserScope checks what the run left in its scope and removes the
// scope, deepest first.
func (d *driver) endUserScope(scope string) {
	leaf := filepath.Join(scope, "isolate-supervisor")
	entries, _ := os.ReadDir(scope)
	for _, e := range entries {
		if e.IsDir() && e.Name() != "isolate-supervisor" {
			d.userLeft = append(d.userLeft, filepath.Join(scope, e.Name()))
		}
	}
	if procs := readTrim(filepath.Join(leaf, "cgroup.procs")); procs != "" {
		d.userLeft = append(d.userLeft, leaf+" holds "+procs)
	}
	for _, dir := range []string{leaf, scope} {
		if err := syscall.Rmdir(dir); err != nil && err != syscall.ENOENT {
			d.userLeft = append(d.userLeft, "rmdir "+dir+": "+err.Error())
		}
	}
}

// processesOf lists the processes running as a uid from lo to hi.
func processesOf(lo, hi int) []string {
	var found []string
	status, _ := filepath.Glob("/proc/[0-9]*/status")
	for _, p := range status {
		data, _ := os.ReadFile(p)
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "Uid:" {
				continue
			}
			if uid, err := strconv.Atoi(f[1]); err == nil && uid >= lo && uid <= hi {
				found = append(found, filepath.Base(filepath.Dir(p)))
			}
		}
	}
	return found
}

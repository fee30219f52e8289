package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// On a systemd host the supervisor is not in the root cgroup but in a
// session scope or a service: a cgroup that holds processes and, by the
// kernel's no-internal-process rule, cannot enable controllers for
// children. These cgroups stand in for that layout.
var (
	userSlice   = filepath.Join(cgroupRoot, "user.slice")
	session     = filepath.Join(userSlice, "session-1.scope")
	adminSlice  = filepath.Join(cgroupRoot, "isolate.slice")
	adminCgroup = "/isolate.slice" // ISOLATE_CGROUP_ROOT, relative to the mount
)

// systemdLayout: from a session scope, isolate refuses cleanly (it never
// writes to a cgroup it did not create), and with ISOLATE_CGROUP_ROOT
// naming a cgroup the administrator prepared it works there.
func (d *driver) systemdLayout() {
	defer d.removeLayout()
	if err := makeLayout(); err != nil {
		d.check("session scope refused", false, "set up: %v", err)
		return
	}
	// A process of the session, as a login shell would be.
	shell := exec.Command("/bin/sleep", "1000")
	if err := startInSession(shell); err != nil {
		d.check("session scope refused", false, "start a session process: %v", err)
		return
	}
	defer func() {
		shell.Process.Kill()
		shell.Wait()
	}()

	r, code, errs := d.runInSession(nil, "--", "/bin/true")
	_, leftErr := os.Stat(filepath.Join(session, "isolate"))
	ok := r != nil && r.Status == "XX" && code == 2 && strings.Contains(r.Message, "controllers") && os.IsNotExist(leftErr)
	msg := errs
	if r != nil {
		msg = r.Message
	}
	d.check("session scope refused", ok, "exit %d, %q; %s/isolate left: %v", code, msg, session, !os.IsNotExist(leftErr))
	// Why: the scope offers the controllers (it is delegated), but the
	// kernel refuses to enable them for its children while it holds a
	// process, and the supervisor is always one.
	err := os.WriteFile(filepath.Join(session, "cgroup.subtree_control"), []byte("+memory"), 0)
	fmt.Printf("note: %s offers %q; enabling +memory for its children while a process is in it: %v\n",
		session, readTrim(filepath.Join(session, "cgroup.controllers")), err)

	env := []string{"ISOLATE_CGROUP_ROOT=" + adminCgroup}
	r, code, errs = d.runInSession(env, "--", "/bin/cat", "/proc/self/cgroup")
	if r == nil || r.Status != "OK" {
		d.check("ISOLATE_CGROUP_ROOT", false, "exit %d, report %+v, stderr %q", code, r, errs)
		return
	}
	want := fmt.Sprintf("0::%s/isolate/box-%d", adminCgroup, r.BoxID)
	d.check("ISOLATE_CGROUP_ROOT", strings.TrimSpace(r.Stdout) == want, "run from the session: program in %q, want %q",
		strings.TrimSpace(r.Stdout), want)
	r, code, errs = d.runInSession(env, "--bind", d.probeDir+":/t", "--mem", "64M", "--", "/t/probe", "touch", "200")
	d.check("ISOLATE_CGROUP_ROOT ML", r != nil && r.Status == "ML" && r.OOMKilled,
		"200 MiB under --mem 64M from the session: %s", summary(r, code, errs))
}

// makeLayout builds what systemd would: user.slice with the controllers
// enabled for its children, a session scope below it (controllers
// available, none enabled), and an administrator's isolate.slice with
// them enabled for isolate.
func makeLayout() error {
	for _, dir := range []string{userSlice, session, adminSlice} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
	}
	for _, dir := range []string{userSlice, adminSlice} {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+cpu +memory +pids"), 0); err != nil {
			return fmt.Errorf("enable controllers in %s: %w", dir, err)
		}
	}
	return nil
}

// removeLayout removes the stand-in cgroups, deepest first, and what
// isolate created in them.
func (d *driver) removeLayout() {
	for _, dir := range []string{filepath.Join(adminSlice, "isolate"), adminSlice, session, userSlice} {
		if err := syscall.Rmdir(dir); err != nil && err != syscall.ENOENT {
			d.check("session layout removed", false, "rmdir %s: %v", dir, err)
		}
	}
}

// startInSession starts cmd in the session scope (CLONE_INTO_CGROUP).
func startInSession(cmd *exec.Cmd) error {
	f, err := os.Open(session)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	return cmd.Start()
}

// runInSession runs `isolate run --json ARGS` from the session scope with
// extra environment env; the report is nil if there was none.
func (d *driver) runInSession(env []string, args ...string) (*report, int, string) {
	cmd := exec.Command(d.bin, append([]string{"run", "--json"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := startInSession(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		return nil, -1, err.Error()
	}
	var rep report
	if json.Unmarshal(out.Bytes(), &rep) != nil {
		return nil, code, strings.TrimSpace(errb.String())
	}
	return &rep, code, strings.TrimSpace(errb.String())
}

// summary describes a run for a result line.
func summary(r *report, code int, errs string) string {
	if r == nil {
		return fmt.Sprintf("no report, exit %d, %q", code, errs)
	}
	return fmt.Sprintf("%s (%q), oom_killed %v, memory_peak %.2f MiB, exit %d", r.Status, r.Message, r.OOMKilled, float64(r.MemoryPeak)/mib, code)
}

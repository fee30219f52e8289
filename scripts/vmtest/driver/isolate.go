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
	"time"

	"github.com/isolate-sandbox/isolate/api"
)

// report is isolate's JSON report, the contract's type (package api is
// pure Go: importing it links neither the runtime nor libseccomp).
type report = api.Report

// run is one `isolate run --json ARGS`: its report and isolate's exit
// status. An error means there was no report to read.
type run struct {
	rep  *report
	code int
	err  error
}

// isolate runs the binary with args; it returns stdout, stderr and the
// exit status.
func (d *driver) isolate(args ...string) (string, string, int, error) {
	cmd := exec.Command(d.bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode(), nil
	}
	return out.String(), errb.String(), 0, err
}

// run runs `isolate run --json ARGS` (options, "--", command).
func (d *driver) run(args ...string) run {
	out, errs, code, err := d.isolate(append([]string{"run", "--json"}, args...)...)
	if err != nil {
		return run{err: fmt.Errorf("isolate run %v: %v", args, err)}
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		return run{code: code, err: fmt.Errorf("isolate run %v: exit %d, no report: %s", args, code, strings.TrimSpace(errs))}
	}
	return run{rep: &rep, code: code}
}

// probe runs the probe in a box: opts, then its arguments.
func (d *driver) probe(opts []string, args ...string) run {
	all := append([]string{"--bind", d.probeDir + ":/t"}, opts...)
	all = append(append(all, "--", "/t/probe"), args...)
	return d.run(all...)
}

// expect prints a FAIL line and returns false unless r has a report with
// status want; otherwise it returns true and prints nothing.
func (d *driver) expect(name string, r run, want string) bool {
	if o := outcome(r, want); o != "" {
		d.check(name, false, "%s", o)
		return false
	}
	return true
}

// start launches `isolate run` with args in the background; its report
// is not read.
func (d *driver) start(args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(d.bin, append([]string{"run"}, args...)...)
	return cmd, cmd.Start()
}

// waitFor polls cond until it holds or timeout passes. Emulated VMs are
// slow, so timeouts here are generous; nothing is measured by them.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Box users are host uids firstUID..firstUID+maxBoxes-1 (isolate/persistent_boxes.go).
const (
	firstUID = 60000
	maxBoxes = 1000
)

// boxProcesses lists the processes running as the user of box id, or of
// any box when id < 0.
func boxProcesses(id int) []string {
	var found []string
	status, _ := filepath.Glob("/proc/[0-9]*/status")
	for _, p := range status {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "Uid:" {
				continue
			}
			uid, _ := strconv.Atoi(f[1])
			if (id < 0 && uid >= firstUID && uid < firstUID+maxBoxes) || uid == firstUID+id {
				found = append(found, filepath.Base(filepath.Dir(p))+" (uid "+f[1]+")")
			}
		}
	}
	return found
}

// readTrim reads a small file, trimmed; "" if it cannot be read.
func readTrim(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// Command driver is the test driver of `make vmtest`. It runs as a child of
// the guest init, inside a VM whose kernel has only cgroup v2, and checks
// with the real isolate binary and static test programs every cgroup
// behaviour the host tests check on v1/hybrid: limits, OOM, peaks, CPU
// accounting and limits, bandwidth, cleanup. It prints one PASS or FAIL line
// per check, a closing "N passed, M failed" line, and exits 1 if any failed.
//
// It reads isolate's JSON report as any user does, through the contract's
// types in package api, so it does not link the runtime (nor libseccomp).
//
// Usage: driver DIR, where DIR holds the isolate binary and t/probe (built
// from internal/bench/testdata/probe.c). `driver container-init PROGRAM
// ARGS...` is the driver's own container runtime (container.go).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == containerInitArg {
		containerInit(os.Args[2:])
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: driver DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	d := &driver{bin: filepath.Join(dir, "isolate"), probeDir: filepath.Join(dir, "t")}
	start := time.Now()
	d.environment()
	for _, c := range checks {
		c(d)
	}
	fmt.Printf("driver: checks took %.1f s\n", time.Since(start).Seconds())
	fmt.Printf("vmtest: %d passed, %d failed\n", d.passed, d.failed)
	if d.failed > 0 {
		os.Exit(1)
	}
}

// checks run in this order; each prints its own PASS or FAIL lines.
var checks = []func(*driver){
	(*driver).isolateCheck,
	(*driver).trueRun,
	(*driver).placement,
	(*driver).limitFiles,
	(*driver).memory,
	(*driver).pids,
	(*driver).cpu,
	(*driver).wall,
	(*driver).bandwidth,
	(*driver).daemon,
	(*driver).killedSupervisor,
	(*driver).systemdLayout,
	(*driver).service,
	(*driver).container,
	(*driver).systemdUnit,
	(*driver).rootless,
	(*driver).noLeftovers,
}

// driver holds where things are and the tally.
type driver struct {
	bin      string // the isolate binary
	probeDir string // holds the probe, bound at /t in boxes
	passed   int
	failed   int
	// The user's runs (rootless.go): scopes made, what they left.
	scopes   int
	userLeft []string
}

// check prints one result line.
func (d *driver) check(name string, ok bool, format string, a ...any) {
	mark := "PASS"
	if ok {
		d.passed++
	} else {
		mark = "FAIL"
		d.failed++
	}
	fmt.Printf("%s %-28s %s\n", mark, name, fmt.Sprintf(format, a...))
}

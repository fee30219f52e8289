package main

import (
	"fmt"
	"strconv"
	"strings"
)

// Under software emulation the guest's clock follows the host's, but a
// vCPU thread the host deschedules runs nothing meanwhile: the guest
// charges that time to whatever task was on the vCPU (TCG reports no steal
// time) and wakes the supervisor late. On a busy host that inflates CPU
// figures by tens of milliseconds. The timing checks below keep the host
// tests' bounds and get up to this many attempts; each failed attempt is
// printed. A real regression (say, a 100 ms polling tick) fails them all.
const attempts = 5

// measured runs one timing check: try reports whether an attempt was
// within bounds and what it measured.
func (d *driver) measured(name string, try func() (bool, string)) {
	var failed []string
	for i := 1; i <= attempts; i++ {
		ok, detail := try()
		if ok {
			if len(failed) > 0 {
				detail += fmt.Sprintf(" (attempt %d; before: %s)", i, strings.Join(failed, "; "))
			}
			d.check(name, true, "%s", detail)
			return
		}
		fmt.Printf("retry %-27s %s\n", name, detail)
		failed = append(failed, detail)
	}
	d.check(name, false, "all %d attempts out of bounds", attempts)
}

// outcome describes a run that has no report or the wrong status; "" if
// it has a report with status want.
func outcome(r run, want string) string {
	if r.err != nil {
		return r.err.Error()
	}
	if string(r.rep.Status) != want {
		return fmt.Sprintf("status %s (%q, exit_code %d, signal %d), want %s; stdout %q stderr %q",
			r.rep.Status, r.rep.Message, r.rep.ExitCode, r.rep.Signal, want, r.rep.Stdout, r.rep.Stderr)
	}
	return ""
}

// cpu: accounting of one and of two threads, and the limit's precision.
func (d *driver) cpu() {
	d.measured("cpu accounting", func() (bool, string) {
		r := d.probe(nil, "spin", "0.5")
		if o := outcome(r, "OK"); o != "" {
			return false, o
		}
		rep := r.rep
		own, _ := strconv.ParseFloat(strings.TrimSpace(rep.Stdout), 64)
		diff := rep.CPUTime - rep.UserTime - rep.SysTime
		rel := 1.0
		if own > 0 {
			rel = (rep.CPUTime - own) / own
		}
		return rep.CPUTime >= 0.49 && rep.CPUTime <= 0.52 && diff < 1e-9 && diff > -1e-9 && rel < 0.02 && rel > -0.02,
			fmt.Sprintf("0.5 s spin: cpu_time %.4f = user %.4f + sys %.4f, program's own %.4f (want 0.49-0.52, within 2%%)",
				rep.CPUTime, rep.UserTime, rep.SysTime, own)
	})
	d.measured("cpu limit", func() (bool, string) {
		r := d.probe([]string{"--time", "0.3"}, "forever")
		if o := outcome(r, "TO"); o != "" {
			return false, o
		}
		rep := r.rep
		return rep.Limit == "cpu" && rep.Killed && r.code == 1 && rep.CPUTime >= 0.3 && rep.CPUTime <= 0.32,
			fmt.Sprintf("--time 0.3: TO %s, killed at cpu_time %.4f (want cpu, 0.30-0.32)", rep.Limit, rep.CPUTime)
	})
	d.measured("cpu of 2 threads", func() (bool, string) {
		r := d.probe(nil, "threads", "2", "0.3")
		if o := outcome(r, "OK"); o != "" {
			return false, o
		}
		return r.rep.CPUTime >= 0.59 && r.rep.CPUTime <= 0.63,
			fmt.Sprintf("2 threads x 0.3 s: cpu_time %.4f (want 0.59-0.63), wall %.3f", r.rep.CPUTime, r.rep.WallTime)
	})
	d.measured("cpu limit of 2 threads", func() (bool, string) {
		r := d.probe([]string{"--time", "0.2"}, "threads", "2", "5")
		if o := outcome(r, "TO"); o != "" {
			return false, o
		}
		return r.rep.Limit == "cpu" && r.rep.CPUTime >= 0.2 && r.rep.CPUTime <= 0.24,
			fmt.Sprintf("--time 0.2, 2 spinning threads: killed at cpu_time %.4f (want 0.20-0.24)", r.rep.CPUTime)
	})
}

// wall: the wall-clock limit.
func (d *driver) wall() {
	d.measured("wall limit", func() (bool, string) {
		r := d.probe([]string{"--wall-time", "0.3"}, "sleep", "10")
		if o := outcome(r, "TO"); o != "" {
			return false, o
		}
		rep := r.rep
		return rep.Limit == "wall" && rep.Killed && rep.WallTime >= 0.3 && rep.WallTime <= 0.5,
			fmt.Sprintf("--wall-time 0.3 on a sleeper: TO %s, wall_time %.3f (want wall, 0.3-0.5)", rep.Limit, rep.WallTime)
	})
}

// bandwidth: under --cpus 0.5 a spinner gets half of the wall time.
func (d *driver) bandwidth() {
	d.measured("--cpus 0.5", func() (bool, string) {
		r := d.probe([]string{"--cpus", "0.5"}, "spin", "1")
		if o := outcome(r, "OK"); o != "" {
			return false, o
		}
		rep := r.rep
		ratio := rep.CPUTime / rep.WallTime
		return ratio >= 0.45 && ratio <= 0.55,
			fmt.Sprintf("1 s spin: cpu_time %.3f over wall_time %.3f = %.3f CPUs (want 0.45-0.55)", rep.CPUTime, rep.WallTime, ratio)
	})
}

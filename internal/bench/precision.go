package bench

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/isolate-sandbox/isolate/isolate"
)

// probeSource is the tests' probe program: spin, forever, threads, touch
// and sleep are the behaviours the precision benchmarks need.
//
//go:embed testdata/probe.c
var probeSource []byte

// The precision targets isolate holds itself to.
const (
	targetOvershootMs = 20.0 // CPU time at kill, past the limit
	targetCPUErrPct   = 2.0  // cpu_time against the program's own rusage
	targetMemErrPct   = 3.0  // memory_peak against what the program touched
)

// overshootRow is how far past a limit runs were stopped, in milliseconds.
type overshootRow struct {
	Label  string  `json:"label"`
	Limit  float64 `json:"limit_s"`
	Ms     dist    `json:"overshoot_ms"`
	Target float64 `json:"target_ms,omitempty"`
}

// errorRow is the relative error of a reported figure, in percent
// (positive: the report says more than the truth).
type errorRow struct {
	Label  string  `json:"label"`
	Pct    dist    `json:"error_pct"`
	MaxAbs float64 `json:"max_abs_error_pct"`
	Target float64 `json:"target_pct"`
}

// precisionResult is the precision part of the bench.
type precisionResult struct {
	Runs          int            `json:"runs"`
	CPULimit      []overshootRow `json:"cpu_limit_overshoot"`
	CPUAccounting []errorRow     `json:"cpu_accounting_error"`
	Memory        []errorRow     `json:"memory_peak_error"`
	WallLimit     []overshootRow `json:"wall_limit_overshoot"`
}

// probeBox is the probe compiled into a directory the box user can read,
// and the options that bind it at /t/probe.
type probeBox struct {
	dir  string
	opts []string
}

// buildProbe compiles the probe statically with the host's gcc.
func buildProbe() (*probeBox, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return nil, errors.New("--precision needs gcc to build its test program (apt-get install gcc)")
	}
	dir, err := os.MkdirTemp("", "isolate-bench-")
	if err != nil {
		return nil, err
	}
	// The box user must reach the binary through the bind.
	os.Chmod(dir, 0o755)
	src := filepath.Join(dir, "probe.c")
	if err := os.WriteFile(src, probeSource, 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if out, err := exec.Command(gcc, "-O1", "-static", "-pthread", "-o", filepath.Join(dir, "probe"), src).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("gcc probe.c: %v: %s", err, lastLine(out))
	}
	return &probeBox{dir: dir, opts: []string{"--bind", dir + ":/t"}}, nil
}

func (p *probeBox) remove() { os.RemoveAll(p.dir) }

// probeRun runs the probe in a box with opts and returns the report.
func (r *benchRunner) probeRun(p *probeBox, out *sink, opts []string, args ...string) (sample, *isolate.Report, error) {
	argv := r.isolateArgs(append(append([]string{}, p.opts...), opts...), append([]string{"/t/probe"}, args...)...)
	return r.isolateRun(argv, out)
}

// precision runs every precision benchmark n times.
func (r *benchRunner) precision(n int) (*precisionResult, error) {
	p, err := buildProbe()
	if err != nil {
		return nil, err
	}
	defer p.remove()
	out, err := newSink()
	if err != nil {
		return nil, err
	}
	defer out.Close()
	res := &precisionResult{Runs: n}
	for _, c := range []struct {
		limit   float64
		threads int
	}{{0.1, 1}, {0.3, 1}, {1, 1}, {0.3, 2}} {
		row, err := r.cpuOvershoot(p, out, n, c.limit, c.threads)
		if err != nil {
			return nil, err
		}
		res.CPULimit = append(res.CPULimit, row)
	}
	for _, threads := range []int{1, 2} {
		row, err := r.cpuAccounting(p, out, n, threads, 0.5)
		if err != nil {
			return nil, err
		}
		res.CPUAccounting = append(res.CPUAccounting, row)
	}
	for _, mib := range []int{64, 200} {
		row, err := r.memoryError(p, out, n, mib)
		if err != nil {
			return nil, err
		}
		res.Memory = append(res.Memory, row)
	}
	for _, limit := range []float64{0.1, 0.5, 1} {
		row, err := r.wallOvershoot(p, out, n, limit)
		if err != nil {
			return nil, err
		}
		res.WallLimit = append(res.WallLimit, row)
	}
	return res, nil
}

func secs(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// cpuOvershoot spins threads threads forever under a CPU limit and
// measures the CPU time at the kill past the limit.
func (r *benchRunner) cpuOvershoot(p *probeBox, out *sink, n int, limit float64, threads int) (overshootRow, error) {
	label := fmt.Sprintf("--time %ss, %d thread", secs(limit), threads)
	args := []string{"forever"}
	if threads > 1 {
		label += "s"
		args = []string{"threads", strconv.Itoa(threads), "1000"}
	}
	var xs []float64
	for i := 0; i < n; i++ {
		// A generous wall limit: on a busy machine the box may wait long
		// for its CPU time, and it is the CPU limit that is measured.
		_, rep, err := r.probeRun(p, out, []string{"--time", secs(limit), "--wall-time", secs(20*limit + 10)}, args...)
		if err != nil {
			return overshootRow{}, err
		}
		if rep.Status != isolate.StatusTO || rep.Limit != isolate.LimitCPU {
			return overshootRow{}, fmt.Errorf("CPU limit %s: status %s limit %q (%s), want TO cpu", label, rep.Status, rep.Limit, rep.Message)
		}
		xs = append(xs, (rep.CPUTime-limit)*1000)
	}
	return overshootRow{Label: label, Limit: limit, Ms: summarize(xs), Target: targetOvershootMs}, nil
}

// cpuAccounting spins threads threads for secs of CPU each; the probe
// prints its own getrusage total, which cpu_time must match.
func (r *benchRunner) cpuAccounting(p *probeBox, out *sink, n, threads int, each float64) (errorRow, error) {
	label := fmt.Sprintf("%d thread", threads)
	if threads > 1 {
		label += "s"
	}
	label += fmt.Sprintf(" × %ss", secs(each))
	var xs []float64
	for i := 0; i < n; i++ {
		_, rep, err := r.probeRun(p, out, nil, "threads", strconv.Itoa(threads), secs(each))
		if err != nil {
			return errorRow{}, err
		}
		own, perr := strconv.ParseFloat(strings.TrimSpace(rep.Stdout), 64)
		if rep.Status != isolate.StatusOK || perr != nil || own <= 0 {
			return errorRow{}, fmt.Errorf("CPU accounting %s: status %s, output %q", label, rep.Status, rep.Stdout)
		}
		xs = append(xs, (rep.CPUTime-own)/own*100)
	}
	return newErrorRow(label, xs, targetCPUErrPct), nil
}

// memoryError touches mib MiB and compares memory_peak with it.
func (r *benchRunner) memoryError(p *probeBox, out *sink, n, mib int) (errorRow, error) {
	label := fmt.Sprintf("%d MiB touched", mib)
	touched := float64(int64(mib) << 20)
	var xs []float64
	for i := 0; i < n; i++ {
		_, rep, err := r.probeRun(p, out, []string{"--mem", strconv.Itoa(mib+256) + "M"}, "touch", strconv.Itoa(mib))
		if err != nil {
			return errorRow{}, err
		}
		if rep.Status != isolate.StatusOK {
			return errorRow{}, fmt.Errorf("memory %s: status %s (%s)", label, rep.Status, rep.Message)
		}
		xs = append(xs, (float64(rep.MemoryPeak)-touched)/touched*100)
	}
	return newErrorRow(label, xs, targetMemErrPct), nil
}

// wallOvershoot sleeps under a wall-clock limit and measures the reported
// wall time past the limit.
func (r *benchRunner) wallOvershoot(p *probeBox, out *sink, n int, limit float64) (overshootRow, error) {
	label := fmt.Sprintf("--wall-time %ss", secs(limit))
	var xs []float64
	for i := 0; i < n; i++ {
		_, rep, err := r.probeRun(p, out, []string{"--wall-time", secs(limit)}, "sleep", "100")
		if err != nil {
			return overshootRow{}, err
		}
		if rep.Status != isolate.StatusTO || rep.Limit != isolate.LimitWall {
			return overshootRow{}, fmt.Errorf("wall limit %s: status %s limit %q (%s), want TO wall", label, rep.Status, rep.Limit, rep.Message)
		}
		xs = append(xs, (rep.WallTime-limit)*1000)
	}
	return overshootRow{Label: label, Limit: limit, Ms: summarize(xs)}, nil
}

func newErrorRow(label string, xs []float64, target float64) errorRow {
	s := summarize(xs)
	maxAbs := s.Max
	if -s.Min > maxAbs {
		maxAbs = -s.Min
	}
	return errorRow{Label: label, Pct: s, MaxAbs: maxAbs, Target: target}
}

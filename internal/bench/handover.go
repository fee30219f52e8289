package bench

// `isolate bench --handover`: one-shot `isolate run` handed to
// a running service by the binary's constructor, against the same run
// in-process, a bare exec and bwrap, interleaved in one run of the bench; then the
// throughput of one and two concurrent callers both ways.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Names of the handover bench's isolate variants.
const (
	VarInProcess = "isolate run, in-process"
	VarService   = "isolate run, via service"
	// The ioi form as judges use it: --run on a box initialised once.
	VarIOIFormInProcess = "isolate --run (ioi form), in-process"
	VarIOIFormService   = "isolate --run (ioi form), via service"
)

// ownIOIBox is the box id of the ioi form's in-process variant; the one
// before it is the handed-over variant's.
const ownIOIBox = 998

// HandoverConfig is what `isolate bench --handover` measures.
type HandoverConfig struct {
	Bin, ServeBin, Version string // the isolate binary (a path the service can check), the service's
	Rounds                 int    // interleaved latency rounds
	PerBlock               int    // runs per throughput block
	Peers                  Peers  // other sandboxes measured in the same rounds
	Seed                   uint64 // the running order's seed
}

// HandoverResult is what it measured.
type HandoverResult struct {
	Machine    machineInfo       `json:"machine"`
	Rounds     int               `json:"rounds"`
	Latency    []VariantResult   `json:"latency"`
	Throughput []handoverThrough `json:"throughput"`
	// Judges is the judges' path with 1 and 2 callers, each on a box
	// initialised once: this isolate's ioi form handed to the service
	// against ioi/isolate's own (when it is there).
	Judges  []judgesThrough `json:"judges_throughput,omitempty"`
	Targets []targetResult  `json:"targets"`
}

// judgesThrough is `--run` per second on initialised boxes, n callers.
type judgesThrough struct {
	Callers int     `json:"callers"`
	Service float64 `json:"service_runs_per_s"`
	IOI     float64 `json:"ioi_isolate_runs_per_s"`
	Ratio   float64 `json:"ratio"`
	// The machine's CPU per run (ms, machineCPU over the block: every
	// process and kernel thread, the callers included, other work too):
	// this isolate's, ioi/isolate's, and
	// `unshare -Urnpimf /bin/true`'s, the kernel's floor for a fresh
	// set of namespaces (0 without unshare).
	ServiceCPU float64 `json:"service_cpu_ms_per_run"`
	IOICPU     float64 `json:"ioi_isolate_cpu_ms_per_run"`
	FloorCPU   float64 `json:"unshare_cpu_ms_per_run,omitempty"`
}

// judgesBoxes are the box ids of the judges' throughput: this isolate's
// two, then ioi/isolate's two (apart from every other box of the bench,
// as the two share the host's uids 60000+id).
var judgesBoxes = [2][2]int{{996, 995}, {994, 993}}

// handoverThrough is runs/s with n concurrent callers, both ways.
type handoverThrough struct {
	Callers   int     `json:"callers"`
	Service   float64 `json:"service_runs_per_s"`
	InProcess float64 `json:"in_process_runs_per_s"`
	Ratio     float64 `json:"ratio"`
}

// RunHandover starts a service of its own (on sockets in a temporary
// directory, stopped at the end) and measures.
func RunHandover(c HandoverConfig) (*HandoverResult, error) {
	svc, err := startService(c.ServeBin, c.Bin)
	if err != nil {
		return nil, err
	}
	defer svc.stop()
	inProc := &benchRunner{bin: c.Bin, version: c.Version, env: oneShotEnv(), order: newOrder(c.Seed)}
	// A caller's ISOLATE_ settings keep its runs in-process (the service
	// honours its own): the service's runs get none of them.
	viaSvc := &benchRunner{bin: c.Bin, version: c.Version, env: append(withoutIsolateVars(os.Environ()), "ISOLATE_SERVICE_SOCKET="+svc.socket)}
	res := &HandoverResult{Machine: describeMachine(c.Version, c.Seed), Rounds: c.Rounds}
	meter := newCPUMeter(svc.cmd.Process.Pid)
	vs := []variant{
		{name: VarBare, argv: []string{"/bin/true"}},
		{name: VarInProcess, argv: inProc.isolateArgs(nil, "/bin/true"), run: inProc.viaTrue("in-process")},
		{name: VarService, argv: viaSvc.isolateArgs(nil, "/bin/true"), run: viaSvc.viaTrue("service")},
	}
	skipped := map[string]string{}
	if bwrap, err := findBwrap(); err != nil {
		skipped[VarBwrap] = err.Error()
	} else {
		vs = append(vs, variant{name: VarBwrap, argv: BwrapArgs(bwrap)})
	}
	forms, err := inProc.ioiForm(viaSvc)
	if err != nil {
		return nil, err
	}
	defer forms.close()
	ps, err := c.Peers.peers()
	if err != nil {
		return nil, err
	}
	defer ps.close()
	vs = append(append(vs, forms.vs...), ps.vs...)
	for name, why := range ps.skipped {
		skipped[name] = why
	}
	progress("%d interleaved rounds of %d variants", c.Rounds, len(vs))
	samples, err := inProc.latency(c.Rounds, vs)
	if err != nil {
		return nil, err
	}
	res.Latency = variantResults(samples, vs, skipped)
	bare := median(samples.wall[VarBare])
	for i := range res.Latency {
		res.Latency[i].RatioToBare = ratio(res.Latency[i].WallMs.Median, bare)
	}
	progress("throughput: blocks of %d runs, 1 and 2 callers, each way", c.PerBlock)
	for _, callers := range []int{1, 2} {
		var svcRates, inRates []float64
		ways := []struct {
			r     *benchRunner
			via   string
			rates *[]float64
		}{{viaSvc, "service", &svcRates}, {inProc, "in-process", &inRates}}
		for b := 0; b < ThroughputBlocks; b++ {
			for _, i := range inProc.order.next(len(ways)) {
				w := ways[i]
				rate, err := block(c.PerBlock, callers, w.r.viaTrue(w.via))
				if err != nil {
					return nil, err
				}
				*w.rates = append(*w.rates, rate)
			}
		}
		t := handoverThrough{Callers: callers, Service: median(svcRates), InProcess: median(inRates)}
		t.Ratio = ratio(t.Service, t.InProcess)
		res.Throughput = append(res.Throughput, t)
	}
	if ioi := c.Peers.ioiBinary(); ioi != "" {
		if res.Judges, err = judgesThroughput(c.PerBlock, viaSvc, ioi, inProc.order); err != nil {
			return nil, err
		}
	}
	res.Targets = handoverTargets(res)
	res.Machine.OtherCPUs = meter.others()
	return res, nil
}

// viaTrue runs `isolate run --json -- /bin/true` once and insists it
// succeeded on the path named (the report's sandbox.via): a bench of the
// service that measured in-process runs would be worse than none.
func (r *benchRunner) viaTrue(via string) func(out *sink) (sample, error) {
	return func(out *sink) (sample, error) {
		took, rep, err := r.isolateTrue(out)
		if err == nil && rep.Sandbox.Via != via {
			err = fmt.Errorf("the run went %q, not %q", rep.Sandbox.Via, via)
		}
		return took, err
	}
}

// ioiForm initialises a box for each way and returns the variants that
// run /bin/true on it in the ioi form, in-process (r, box ownIOIBox) and
// handed to the service (svc, the box before): as a judge, each box's
// runs go one way.
func (r *benchRunner) ioiForm(svc *benchRunner) (*peerSet, error) {
	ps := &peerSet{}
	for i, w := range []struct {
		name string
		env  []string
	}{{VarIOIFormInProcess, r.env}, {VarIOIFormService, svc.env}} {
		box := []string{r.bin, "--box-id=" + strconv.Itoa(ownIOIBox-i)}
		if _, err := timed(append(box, "--init"), r.env, nil); err != nil {
			ps.close()
			return nil, err
		}
		ps.closers = append(ps.closers, func() { timed(append(box, "--cleanup"), r.env, nil) })
		run, env := append(box, "--run", "--", "/bin/true"), w.env
		ps.vs = append(ps.vs, variant{name: w.name, argv: run, run: func(*sink) (sample, error) { return timed(run, env, nil) }})
	}
	return ps, nil
}

// judgesThroughput measures `--run` of /bin/true per second with 1 and 2
// callers, each caller on one box of its own initialised once, test
// after test on the same box (as judges run): this isolate's ioi form
// through the service (svc) against ioi/isolate (ioi), blocks in a random
// order each turn.
func judgesThroughput(perBlock int, svc *benchRunner, ioi string, o *order) ([]judgesThrough, error) {
	var boxes [2][][]string // per way, the --run argv of each of its boxes
	for i, bin := range []string{svc.bin, ioi} {
		for _, id := range judgesBoxes[i] {
			box := []string{bin, "--box-id=" + strconv.Itoa(id)}
			if _, err := timed(append(box, "--init"), svc.env, nil); err != nil {
				return nil, fmt.Errorf("%s --init: %w", strings.Join(box, " "), err)
			}
			defer timed(append(box, "--cleanup"), svc.env, nil)
			boxes[i] = append(boxes[i], append(box, "--run", "--", "/bin/true"))
		}
	}
	// With n callers a way has n boxes: each run takes a box no other
	// caller is using, and gives it back, so each box serves one caller's
	// runs one after another.
	runOn := func(argvs [][]string) func(*sink) (sample, error) {
		free := make(chan []string, len(argvs))
		for _, argv := range argvs {
			free <- argv
		}
		return func(*sink) (sample, error) {
			argv := <-free
			defer func() { free <- argv }()
			return timed(argv, svc.env, nil)
		}
	}
	unshare, _ := exec.LookPath("unshare")
	var res []judgesThrough
	for _, callers := range []int{1, 2} {
		runs := []func(*sink) (sample, error){runOn(boxes[0][:callers]), runOn(boxes[1][:callers])}
		if unshare != "" {
			floor := []string{unshare, "-Urnpimf", "/bin/true"}
			runs = append(runs, func(*sink) (sample, error) { return timed(floor, svc.env, nil) })
		}
		rates, cpus := make([][]float64, len(runs)), make([][]float64, len(runs))
		for b := 0; b < ThroughputBlocks; b++ {
			for _, i := range o.next(len(runs)) {
				run := runs[i]
				used := machineCPU()
				rate, err := block(perBlock, callers, run)
				if err != nil {
					return nil, err
				}
				rates[i] = append(rates[i], rate)
				cpus[i] = append(cpus[i], ms(machineCPU()-used)/float64(perBlock))
			}
		}
		t := judgesThrough{Callers: callers, Service: median(rates[0]), IOI: median(rates[1]),
			ServiceCPU: median(cpus[0]), IOICPU: median(cpus[1])}
		if len(runs) > 2 {
			t.FloorCPU = median(cpus[2])
		}
		t.Ratio = ratio(t.Service, t.IOI)
		res = append(res, t)
	}
	return res, nil
}

// block runs n runs on callers concurrent callers, each with its own
// sink; runs per second.
func block(n, callers int, run func(*sink) (sample, error)) (float64, error) {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	start := time.Now()
	for w := 0; w < callers; w++ {
		out, err := newSink()
		if err != nil {
			return 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer out.Close()
			for left.Add(-1) >= 0 {
				if _, err := run(out); err != nil {
					once.Do(func() { firstErr = err })
					left.Store(0)
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func handoverTargets(res *HandoverResult) []targetResult {
	var ts []targetResult
	byName := map[string]VariantResult{}
	for _, v := range res.Latency {
		byName[v.Name] = v
	}
	ratioTarget := func(name string, x, max float64, target string) {
		if x > 0 {
			ts = append(ts, targetResult{Name: name, Value: x, Target: target, Met: x <= max})
		}
	}
	if v, ok := byName[VarService]; ok {
		ratioTarget("isolate run via service: median / bare exec", v.RatioToBare, 1.5, "≤ 1.50")
		ratioTarget("isolate run via service: back-to-back p90 / median", ratio(v.WallMs.P90, v.WallMs.Median), 1.5, "≤ 1.50")
	}
	if v, ok := byName[VarInProcess]; ok {
		ratioTarget("isolate run in-process: median / bwrap", v.RatioToBwrap, 1, "≤ 1.00")
	}
	// The judges' path against ioi/isolate's, when it ran in the rounds.
	if ioi := byName[VarIOI]; ioi.Skipped == "" && ioi.WallMs.Median > 0 {
		for _, r := range []struct {
			variant, name, target string
			max                   float64
		}{
			{VarIOIFormInProcess, "ioi form in-process: median / ioi/isolate", "≤ 1.25", 1.25},
			{VarIOIFormService, "ioi form via service: median / ioi/isolate", "≤ 1.00", 1},
		} {
			if v, ok := byName[r.variant]; ok && v.WallMs.Median > 0 {
				ratioTarget(r.name, v.WallMs.Median/ioi.WallMs.Median, r.max, r.target)
			}
		}
		if v, ok := byName[VarIOIFormService]; ok && v.WallMs.Median > 0 {
			ratioTarget("ioi form via service: back-to-back p90 / median", ratio(v.WallMs.P90, v.WallMs.Median), 1.5, "≤ 1.50")
		}
	}
	for _, t := range res.Throughput {
		if t.Callers == 2 {
			ts = append(ts, targetResult{Name: "2 callers: runs/s via service / in-process", Value: t.Ratio, Target: "≥ 2.00", Met: t.Ratio >= 2})
		}
	}
	// One box per caller, test after test, as judges run.
	for _, t := range res.Judges {
		ts = append(ts, targetResult{Name: fmt.Sprintf("%d caller(s), a box each: --run/s via service / ioi/isolate", t.Callers), Value: t.Ratio, Target: "≥ 1.00", Met: t.Ratio >= 1})
		if t.ServiceCPU > 0 && t.IOICPU > 0 {
			d := t.ServiceCPU - t.IOICPU
			ts = append(ts, targetResult{Name: fmt.Sprintf("%d caller(s): CPU ms per run, via service - ioi/isolate", t.Callers), Value: d, Target: "≤ 0.20", Met: d <= 0.2})
		}
	}
	return ts
}

// withoutIsolateVars is env without ISOLATE_ settings.
func withoutIsolateVars(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "ISOLATE_") {
			out = append(out, kv)
		}
	}
	return out
}

// service is an isolate-serve the bench started.
type service struct {
	cmd    *exec.Cmd
	dir    string
	socket string // its CLI socket
	log    *bytes.Buffer
	exited chan error // its Wait's result
}

// startService starts serveBin on sockets of its own, taking the CLI
// runs of bin, with the further options given, and waits until its CLI
// socket is there and its API's takes a connection (it comes last, once
// the service is ready).
func startService(serveBin, bin string, options ...string) (*service, error) {
	dir, err := os.MkdirTemp("", "isolate-bench-svc-")
	if err != nil {
		return nil, err
	}
	s := &service{dir: dir, socket: filepath.Join(dir, "cli.sock"), log: &bytes.Buffer{}}
	s.cmd = exec.Command(serveBin, "--socket", filepath.Join(dir, "api.sock"), "--cli-socket", s.socket,
		"--cli-binary", bin, "--store", filepath.Join(dir, "files"))
	s.cmd.Args = append(s.cmd.Args, options...)
	s.cmd.Env = withoutIsolateVars(os.Environ())
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, s.log
	// The service ends with the bench, however the bench ends.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", serveBin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	deadline := time.After(30 * time.Second)
	for {
		// The API's socket is there a moment before it listens: ready is
		// a connection it takes.
		if _, err := os.Stat(s.socket); err == nil {
			if c, err := net.Dial("unix", filepath.Join(dir, "api.sock")); err == nil {
				c.Close()
				break
			}
		}
		select {
		case err := <-exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s exited (%v): %s", serveBin, err, lastLine(s.log.Bytes()))
		case <-deadline:
			s.cmd.Process.Kill()
			<-exited
			os.RemoveAll(dir)
			return nil, errors.New("the service did not listen within 30 s")
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.exited = exited
	return s, nil
}

// stop drains the service (SIGTERM) and removes its directory.
func (s *service) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	os.RemoveAll(s.dir)
}

// PrintHandover writes the handover bench's results: as markdown tables
// or for a person at a terminal.
func PrintHandover(w io.Writer, res *HandoverResult, markdown bool) {
	m := res.Machine
	row := func(cells ...string) {
		if markdown {
			fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
		} else {
			fmt.Fprintf(w, "  %-62s", cells[0])
			for _, c := range cells[1:] {
				fmt.Fprintf(w, " %10s", c)
			}
			fmt.Fprintln(w)
		}
	}
	rule := func(n int) {
		if markdown {
			fmt.Fprintln(w, "|"+strings.Repeat("---|", n))
		}
	}
	fmt.Fprintf(w, "isolate bench --handover · %s · %d CPUs · %s · Linux %s · cgroup %s · load %s · isolate %s · --seed %d\n\n", m.Date, m.CPUs, m.CPUModel, m.Kernel, m.Cgroup, m.Load, m.Isolate, m.Seed)
	if m.busy() {
		fmt.Fprintf(w, "warning: other work kept %.2f of %d CPUs busy meanwhile: it inflates these figures\n\n", m.OtherCPUs, m.CPUs)
	}
	fmt.Fprintf(w, "/bin/true, %d interleaved rounds, each in a random order (ms from fork to reap)\n\n", res.Rounds)
	row("", "median", "p90", "min", "× bare", "× bwrap")
	rule(6)
	for _, v := range res.Latency {
		if v.Skipped != "" {
			fmt.Fprintf(w, "%s skipped: %s\n", v.Name, v.Skipped)
			continue
		}
		row(v.Name, f2(v.WallMs.Median), f2(v.WallMs.P90), f2(v.WallMs.Min), ratioText(v.RatioToBare), ratioText(v.RatioToBwrap))
	}
	fmt.Fprintln(w, "\nthroughput, runs/s (median of blocks, a random order each turn)")
	fmt.Fprintln(w)
	row("callers", "service", "in-process", "ratio")
	rule(4)
	for _, t := range res.Throughput {
		row(fmt.Sprint(t.Callers), f2(t.Service), f2(t.InProcess), f2(t.Ratio))
	}
	if len(res.Judges) > 0 {
		fmt.Fprintln(w, "\nthe judges' path, --run/s on initialised boxes, one box per caller (median of blocks, a random order each turn)")
		fmt.Fprintln(w, "and the machine's CPU per run (ms, every task's; unshare -Urnpimf /bin/true: the kernel's floor)")
		fmt.Fprintln(w)
		row("callers", "ioi form via service", "ioi/isolate", "ratio")
		rule(4)
		for _, t := range res.Judges {
			row(fmt.Sprint(t.Callers), f2(t.Service), f2(t.IOI), f2(t.Ratio))
		}
		fmt.Fprintln(w)
		row("callers", "CPU: via service", "ioi/isolate", "unshare")
		rule(4)
		for _, t := range res.Judges {
			row(fmt.Sprint(t.Callers), f2(t.ServiceCPU), f2(t.IOICPU), f2(t.FloorCPU))
		}
	}
	fmt.Fprintln(w, "\ntargets")
	fmt.Fprintln(w)
	row("", "value", "target", "met")
	rule(4)
	for _, t := range res.Targets {
		met := "no"
		if t.Met {
			met = "yes"
		}
		row(t.Name, f2(t.Value), t.Target, met)
	}
}

func f2(x float64) string { return fmt.Sprintf("%.2f", x) }

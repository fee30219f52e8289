package bench

// `isolate bench --service`: the service (isolate-serve, started by the
// bench on sockets of its own) against the one-shot paths. Latency of
// /bin/true, rounds interleaved (bare exec, a request over one keep-alive
// connection on the API socket, one-shot `isolate run`, bwrap); then
// throughput with 1, 2 and 4 concurrent clients, the service against
// one-shot `isolate run`, rounds taking turns in a random order (the
// machine's speed drifts within minutes: one block of each compares badly).
//
// The client speaks just enough HTTP/1.1 for the service's answers, so
// that the isolate binary links no net/http.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ServiceConfig is what `isolate bench --service` measures.
type ServiceConfig struct {
	Bin, ServeBin, Version string  // the isolate binary; the isolate-serve to start
	Rounds                 int     // interleaved latency rounds
	Seconds                float64 // length of each throughput measurement
	ThroughputRounds       int     // rounds per number of clients, each in a random order
	Seed                   uint64  // the running order's seed
}

// Names of the service bench's variants.
const (
	VarAPI     = "service POST /v1/run"
	VarOneShot = "isolate run (one-shot)"
	// The same request right after another's answer, and 10 ms after it:
	// whether what the service does once a request is answered (the
	// box's end, the next box's build) slows the next request.
	VarAPIBackToBack = "POST, right after another"
	VarAPISpaced     = "POST, 10 ms after another"
)

// apiSpacing is the pause before VarAPISpaced's request.
const apiSpacing = 10 * time.Millisecond

// ServiceResult is what it measured.
type ServiceResult struct {
	Machine  machineInfo  `json:"machine"`
	Rounds   int          `json:"rounds"`
	Parallel int          `json:"service_parallel"`
	Latency  []serviceLat `json:"latency"`
	// BackToBack is the median of a request right after another's answer
	// over that of one 10 ms after (target: at most 1.2).
	BackToBack float64        `json:"back_to_back_over_spaced"`
	Claimed    int            `json:"runs_in_box_built_ahead"`
	Runs       int            `json:"api_runs"`
	Stages     []serviceStage `json:"stages_ms"`
	Through    []serviceTput  `json:"throughput"`
	// MCP is what a tool call of `isolate mcp` adds to the same run
	// through the API (Python's print(1)).
	MCP *mcpResult `json:"mcp,omitempty"`
}

// serviceLat is the latency of one way of running /bin/true.
type serviceLat struct {
	Name    string  `json:"name"`
	Median  float64 `json:"median_ms"`
	P99     float64 `json:"p99_ms"`
	XBare   float64 `json:"ratio_to_bare"`
	Skipped string  `json:"skipped,omitempty"`
}

// timedWay is one way of running /bin/true and its samples (ms).
type timedWay struct {
	name string
	// before, if set, runs untimed right before run.
	before  func() error
	run     func() error
	samples []float64
}

type serviceStage struct {
	Name   string  `json:"name"`
	Median float64 `json:"median"`
	Runs   int     `json:"runs"`
}

type serviceTput struct {
	Clients    int       `json:"clients"`
	Service    float64   `json:"service_runs_per_s"`
	ServiceCPU float64   `json:"service_cpu_ms_per_run"`
	OneShot    float64   `json:"one_shot_runs_per_s"`
	OneShotCPU float64   `json:"one_shot_cpu_ms_per_run"`
	Ratio      float64   `json:"ratio"`
	Rounds     []float64 `json:"round_ratios"`
}

const apiRequest = `{"commands":[{"args":["/bin/true"]}]}`

// RunService starts a service of its own and measures.
func RunService(c ServiceConfig) (*ServiceResult, error) {
	parallel := max(runtime.NumCPU(), 4)
	svc, err := startService(c.ServeBin, c.Bin, "--parallel", strconv.Itoa(parallel), "--queue", "64")
	if err != nil {
		return nil, err
	}
	defer svc.stop()
	apiSock := filepath.Join(svc.dir, "api.sock")
	res := &ServiceResult{Machine: describeMachine(c.Version, c.Seed), Rounds: c.Rounds, Parallel: parallel}
	meter := newCPUMeter(svc.cmd.Process.Pid)
	client, err := dialAPI(apiSock)
	if err != nil {
		return nil, err
	}
	defer client.close()
	env := oneShotEnv()
	oneShot := func() error { _, err := timed([]string{c.Bin, "run", "--", "/bin/true"}, env, nil); return err }
	vs := []*timedWay{
		{name: VarBare, run: func() error { _, err := timed([]string{"/bin/true"}, nil, nil); return err }},
		{name: VarAPI, run: client.post},
		{name: VarOneShot, run: oneShot},
		{name: VarAPIBackToBack, before: client.post, run: client.post},
		{name: VarAPISpaced, before: func() error {
			err := client.post()
			time.Sleep(apiSpacing)
			return err
		}, run: client.post},
	}
	var skipped []serviceLat
	if bwrap, err := findBwrap(); err != nil {
		skipped = append(skipped, serviceLat{Name: VarBwrap, Skipped: err.Error()})
	} else {
		vs = append(vs, &timedWay{name: VarBwrap, run: func() error { _, err := timed(BwrapArgs(bwrap), nil, nil); return err }})
	}
	progress("%d interleaved rounds of %d variants", c.Rounds, len(vs))
	o := newOrder(c.Seed)
	for round := -warmupRounds; round < c.Rounds; round++ {
		for _, i := range o.next(len(vs)) {
			v := vs[i]
			if v.before != nil {
				if err := v.before(); err != nil {
					return nil, fmt.Errorf("%s: %v", v.name, err)
				}
			}
			start := time.Now()
			if err := v.run(); err != nil {
				return nil, fmt.Errorf("%s: %v", v.name, err)
			}
			if round >= 0 {
				v.samples = append(v.samples, ms(time.Since(start)))
			}
		}
	}
	bare := median(vs[0].samples)
	for _, v := range vs {
		s := append([]float64(nil), v.samples...)
		sort.Float64s(s)
		res.Latency = append(res.Latency, serviceLat{Name: v.name, Median: median(s), P99: quantile(s, 0.99), XBare: ratio(median(s), bare)})
	}
	res.Latency = append(res.Latency, skipped...)
	for _, v := range res.Latency {
		switch v.Name {
		case VarAPIBackToBack:
			res.BackToBack = v.Median
		case VarAPISpaced:
			res.BackToBack = ratio(res.BackToBack, v.Median)
		}
	}
	res.Stages, res.Claimed, res.Runs = client.stages()
	progress("MCP: run_code(print(1)) through isolate mcp against POST /v1/exec, %d interleaved rounds", c.Rounds)
	if res.MCP, err = measureMCP(c.Bin, apiSock, c.Rounds, o); err != nil {
		return nil, err
	}

	progress("throughput: %d rounds of %.0f s, 1, 2 and 4 clients, a random order each round", c.ThroughputRounds, c.Seconds)
	for _, clients := range []int{1, 2, 4} {
		t := serviceTput{Clients: clients}
		var api, apiCPU, one, oneCPU []float64
		measureAPI := func() error {
			n, cpu, err := throughputFor(clients, c.Seconds, func() (func() error, func(), error) {
				cl, err := dialAPI(apiSock)
				if err != nil {
					return nil, nil, err
				}
				cl.keep = false
				return cl.post, cl.close, nil
			})
			api, apiCPU = append(api, n), append(apiCPU, cpu)
			return err
		}
		measureOne := func() error {
			n, cpu, err := throughputFor(clients, c.Seconds, func() (func() error, func(), error) { return oneShot, func() {}, nil })
			one, oneCPU = append(one, n), append(oneCPU, cpu)
			return err
		}
		for r := 0; r < c.ThroughputRounds; r++ {
			first, second := measureAPI, measureOne
			if o.next(2)[0] == 1 {
				first, second = measureOne, measureAPI
			}
			if err := first(); err != nil {
				return nil, err
			}
			if err := second(); err != nil {
				return nil, err
			}
			t.Rounds = append(t.Rounds, ratio(api[r], one[r]))
		}
		t.Service, t.ServiceCPU, t.OneShot, t.OneShotCPU = median(api), median(apiCPU), median(one), median(oneCPU)
		t.Ratio = ratio(t.Service, t.OneShot)
		res.Through = append(res.Through, t)
	}
	res.Machine.OtherCPUs = meter.others()
	return res, nil
}

// throughputFor is runs per second with clients callers looping for the
// given time, each with its own runner from newRunner, and the CPU per
// run of this process and its children (the service and its boxes, or
// the one-shot processes).
func throughputFor(clients int, seconds float64, newRunner func() (run func() error, done func(), err error)) (perSecond, cpuMs float64, err error) {
	var n atomic.Int64
	var once sync.Once
	var firstErr error
	cpu0 := treeCPU()
	start := time.Now()
	deadline := start.Add(time.Duration(seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		run, done, err := newRunner()
		if err != nil {
			return 0, 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done()
			for time.Now().Before(deadline) {
				if err := run(); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, firstErr
	}
	runs := float64(max(n.Load(), 1))
	return float64(n.Load()) / time.Since(start).Seconds(), ms(treeCPU()-cpu0) / runs, nil
}

// treeCPU is the CPU time of this process and of its children, reaped or
// alive (their own and their reaped children's): the service is a child
// that lives throughout. Read at both ends of a measurement, a child
// alive at either end counts once.
func treeCPU() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	total := tv(self.Utime) + tv(self.Stime) + tv(children.Utime) + tv(children.Stime)
	lists, _ := filepath.Glob("/proc/self/task/*/children")
	for _, l := range lists {
		b, _ := os.ReadFile(l)
		for _, pid := range strings.Fields(string(b)) {
			total += liveCPU(pid)
		}
	}
	return total
}

// liveCPU is utime+stime+cutime+cstime of process pid (0 once reaped),
// from /proc/PID/stat in USER_HZ ticks (100 on every Linux architecture
// Go supports).
func liveCPU(pid string) time.Duration {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	i := strings.LastIndexByte(string(b), ')')
	if err != nil || i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, v := range f[11:15] { // fields 14-17
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100
}

// apiClient posts /bin/true over one keep-alive connection to the API's
// unix socket, and keeps the answers (read after the timing, by stages).
type apiClient struct {
	conn    net.Conn
	r       *bufio.Reader
	keep    bool // keep the answers
	answers [][]byte
}

func dialAPI(sock string) (*apiClient, error) {
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("the service's API: %w", err)
	}
	return &apiClient{conn: conn, r: bufio.NewReader(conn), keep: true}, nil
}

func (a *apiClient) close() { a.conn.Close() }

func (a *apiClient) post() error {
	status, body, err := postJSON(a.conn, a.r, "isolate", "/v1/run", apiRequest)
	if err != nil {
		return err
	}
	if status != 200 || !strings.Contains(string(body), `"status":"OK"`) {
		return fmt.Errorf("%d %s", status, body)
	}
	if a.keep {
		a.answers = append(a.answers, body)
	}
	return nil
}

// postJSON sends one HTTP/1.1 POST of a JSON body on a kept-alive
// connection and reads its answer.
func postJSON(w io.Writer, r *bufio.Reader, host, path, body string) (status int, answer []byte, err error) {
	return sendRequest(w, r, "POST", host, path, body)
}

// sendRequest sends one HTTP/1.1 request with a JSON body (or none) on a
// kept-alive connection and reads its answer.
func sendRequest(w io.Writer, r *bufio.Reader, method, host, path, body string) (status int, answer []byte, err error) {
	req := method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := io.WriteString(w, req); err != nil {
		return 0, nil, err
	}
	return readResponse(r)
}

// readResponse reads one HTTP/1.1 response: its status and body, sized
// by Content-Length or chunked.
func readResponse(r *bufio.Reader) (status int, body []byte, err error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, nil, err
	}
	if f := strings.Fields(line); len(f) < 2 {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	} else if status, err = strconv.Atoi(f[1]); err != nil {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	length, chunked := -1, false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0, nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "content-length":
			if length, err = strconv.Atoi(value); err != nil {
				return 0, nil, fmt.Errorf("bad Content-Length %q", value)
			}
		case "transfer-encoding":
			chunked = strings.EqualFold(value, "chunked")
		}
	}
	switch {
	case status == 204 || status == 304:
		return status, nil, nil // no body, by definition
	case chunked:
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return 0, nil, err
			}
			size, _, _ := strings.Cut(strings.TrimSpace(line), ";")
			n, err := strconv.ParseInt(size, 16, 32)
			if err != nil {
				return 0, nil, fmt.Errorf("bad chunk size %q", line)
			}
			chunk := make([]byte, n+2) // the chunk and its CRLF
			if _, err := io.ReadFull(r, chunk); err != nil {
				return 0, nil, err
			}
			if n == 0 {
				return status, body, nil
			}
			body = append(body, chunk[:n]...)
		}
	case length >= 0:
		body = make([]byte, length)
		_, err = io.ReadFull(r, body)
		return status, body, err
	default:
		return 0, nil, fmt.Errorf("an answer with neither Content-Length nor chunks (status %d)", status)
	}
}

// stages are the median of each stage of the answers' reports, how many
// runs took a box built ahead, and how many answers there were.
func (a *apiClient) stages() (rows []serviceStage, claimed, runs int) {
	stages := map[string][]float64{}
	for _, body := range a.answers {
		var r struct {
			Results []struct {
				Sandbox struct {
					SetupTime    float64            `json:"setup_time"`
					TeardownTime float64            `json:"teardown_time"`
					Stages       map[string]float64 `json:"stages"`
				} `json:"sandbox"`
			} `json:"results"`
		}
		if json.Unmarshal(body, &r) != nil || len(r.Results) != 1 {
			continue
		}
		sb := r.Results[0].Sandbox
		if sb.Stages == nil {
			sb.Stages = map[string]float64{}
		}
		if _, ok := sb.Stages["claim"]; ok {
			claimed++
		}
		sb.Stages["(setup_time)"], sb.Stages["(teardown_time)"] = sb.SetupTime, sb.TeardownTime
		for k, v := range sb.Stages {
			stages[k] = append(stages[k], v*1e3)
		}
	}
	for k, v := range stages {
		rows = append(rows, serviceStage{Name: k, Median: median(v), Runs: len(v)})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, claimed, len(a.answers)
}

// PrintService writes the service bench's results for a person at a
// terminal.
func PrintService(w io.Writer, res *ServiceResult) {
	m := res.Machine
	fmt.Fprintf(w, "isolate bench --service · %s · %d CPUs · %s · Linux %s · cgroup %s · load %s · isolate %s · --seed %d\n\n", m.Date, m.CPUs, m.CPUModel, m.Kernel, m.Cgroup, m.Load, m.Isolate, m.Seed)
	if m.busy() {
		fmt.Fprintf(w, "warning: other work kept %.2f of %d CPUs busy meanwhile: it inflates these figures\n\n", m.OtherCPUs, m.CPUs)
	}
	fmt.Fprintf(w, "latency of /bin/true, %d interleaved rounds, the service's --parallel %d (ms):\n", res.Rounds, res.Parallel)
	fmt.Fprintf(w, "  %-26s %8s %8s %8s\n", "", "median", "p99", "x bare")
	for _, v := range res.Latency {
		if v.Skipped != "" {
			fmt.Fprintf(w, "  %-26s skipped: %s\n", v.Name, v.Skipped)
			continue
		}
		fmt.Fprintf(w, "  %-26s %8.2f %8.2f %8.2f\n", v.Name, v.Median, v.P99, v.XBare)
	}
	met := "missed"
	if res.BackToBack <= 1.2 {
		met = "met"
	}
	fmt.Fprintf(w, "a request right after another / 10 ms after: %.2f (target ≤ 1.20: %s)\n", res.BackToBack, met)
	for _, v := range res.Latency {
		if v.Name == VarAPI && v.XBare > 0 {
			met := "missed"
			if v.XBare <= 1.5 {
				met = "met"
			}
			fmt.Fprintf(w, "POST /v1/run / bare exec: %.2f (target ≤ 1.50: %s)\n", v.XBare, met)
		}
	}
	fmt.Fprintf(w, "service runs in a box built ahead: %d of %d; median stages (ms):\n", res.Claimed, res.Runs)
	for _, s := range res.Stages {
		fmt.Fprintf(w, "  %-20s %8.3f  (%d runs)\n", s.Name, s.Median, s.Runs)
	}
	if m := res.MCP; m != nil && m.Skipped != "" {
		fmt.Fprintf(w, "MCP run_code(print(1)) against POST /v1/exec: skipped: %s\n", m.Skipped)
	} else if m != nil {
		met := "missed"
		if m.Met {
			met = "met"
		}
		fmt.Fprintf(w, "python print(1): POST /v1/exec %.2f ms, MCP run_code through isolate mcp %.2f ms: %+.2f ms (target ≤ +%.0f: %s)\n",
			m.API, m.MCP, m.Over, mcpTarget, met)
	}
	fmt.Fprintf(w, "throughput of /bin/true, rounds in a random order each\n")
	fmt.Fprintf(w, "(medians; runs/s; CPU ms per run: the service process with its boxes and clients, or the\n")
	fmt.Fprintf(w, "one-shot processes with theirs; ratio: of the medians, with the rounds' own in brackets):\n")
	fmt.Fprintf(w, "  %-8s %10s %8s %12s %8s %8s\n", "clients", "service", "CPU", "one-shot", "CPU", "ratio")
	for _, t := range res.Through {
		each := make([]string, len(t.Rounds))
		for i, x := range t.Rounds {
			each[i] = fmt.Sprintf("%.2f", x)
		}
		fmt.Fprintf(w, "  %-8d %10.1f %8.2f %12.1f %8.2f %8.2f  [%s]\n", t.Clients, t.Service, t.ServiceCPU,
			t.OneShot, t.OneShotCPU, t.Ratio, strings.Join(each, " "))
	}
}

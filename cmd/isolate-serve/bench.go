package main

// `isolate serve bench`: the service against the one-shot paths, in one
// session. Latency of /bin/true, rounds interleaved (bare exec, a request
// over one keep-alive connection on the unix socket, one-shot `isolate
// run`, bwrap); then throughput with 1, 2 and 4 concurrent clients, the
// service against one-shot `isolate run`, in alternating rounds (the
// machine's speed drifts within minutes: one block of each compares
// badly). A benchmark, not a test.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/isolate-sandbox/isolate/filestore"
	"github.com/isolate-sandbox/isolate/internal/bench"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/server"
)

var devNull, _ = os.OpenFile(os.DevNull, os.O_RDWR, 0)

// undoStack is what the bench made, undone last first, once: at its end
// or from the signal that ends it, whichever comes first.
type undoStack struct {
	mu   sync.Mutex
	fns  []func()
	done bool
}

func (u *undoStack) push(f func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.fns = append(u.fns, f)
}

func (u *undoStack) run() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return
	}
	u.done = true
	for i := len(u.fns) - 1; i >= 0; i-- {
		u.fns[i]()
	}
}

const benchRequest = `{"commands":[{"args":["/bin/true"]}]}`

func benchService(args []string) error {
	fs := flag.NewFlagSet("isolate serve bench", flag.ContinueOnError)
	rounds := fs.Int("rounds", 200, "interleaved latency rounds")
	seconds := fs.Float64("seconds", 5, "length of each throughput measurement")
	tputRounds := fs.Int("throughput-rounds", 3, "alternating rounds of the service's and one-shot's throughput per number of clients")
	isolateBin := fs.String("isolate", "", "the one-shot isolate binary (default: beside this one)")
	poolMax := fs.Int("pool", -1, "boxes built ahead, at most (default 2 x the service's parallel; 0: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("must run as root")
	}
	if *isolateBin == "" {
		self, _ := os.Executable()
		*isolateBin = filepath.Join(filepath.Dir(self), "isolate")
	}
	if _, err := os.Stat(*isolateBin); err != nil {
		return fmt.Errorf("the one-shot isolate: %v (--isolate PATH)", err)
	}
	// What the bench makes goes when it ends, also when a signal ends it
	// (Ctrl-C, or its output's reader gone, as in `| head`).
	var undo undoStack
	defer undo.run()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	defer signal.Stop(sigs)
	go func() {
		sig := <-sigs
		undo.run()
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()
	dir, err := os.MkdirTemp("", "isolate-bench-")
	if err != nil {
		return err
	}
	undo.push(func() { os.RemoveAll(dir) })
	store, err := filestore.Open(filepath.Join(dir, "files"), 1<<20, 0, time.Hour)
	if err != nil {
		return err
	}
	undo.push(func() { store.Close() })
	host, err := isolate.NewHost(nil)
	if err != nil {
		return err
	}
	cpus := usableCPUs()
	parallel := max(cpus, 4)
	if *poolMax < 0 {
		*poolMax = 2 * parallel
	}
	if err := host.StartPool(isolate.PoolConfig{Max: *poolMax}); err != nil {
		return err
	}
	undo.push(host.StopPool)
	srv := server.New(server.Config{Runner: hostRunner{host}, Store: store, Parallel: parallel, Queue: 64, Version: version})
	sock := filepath.Join(dir, "api.sock")
	l, err := server.ListenUnix(sock, -1)
	if err != nil {
		return err
	}
	go srv.Serve(l)
	undo.push(func() { srv.Shutdown(time.Second) })

	latencyClient := newAPIClient(sock)
	variants := []struct {
		name string
		run  func() error
	}{
		{"bare exec", func() error { return spawn([]string{"/bin/true"}) }},
		{"service POST /v1/run", latencyClient.post},
		{"isolate run (one-shot)", func() error { return spawn([]string{*isolateBin, "run", "--", "/bin/true"}) }},
	}
	if bwrap, err := exec.LookPath("bwrap"); err == nil {
		variants = append(variants, struct {
			name string
			run  func() error
		}{"bwrap", func() error { return spawn(bench.BwrapArgs(bwrap)) }})
	} else {
		fmt.Println("bwrap: not installed, skipped")
	}
	samples := make([][]time.Duration, len(variants))
	for i := range variants { // warm up: page cache, the service's first box
		variants[i].run()
	}
	for r := 0; r < *rounds; r++ {
		for k := range variants {
			v := (k + r) % len(variants) // rotate who goes first
			start := time.Now()
			if err := variants[v].run(); err != nil {
				return fmt.Errorf("%s: %v", variants[v].name, err)
			}
			samples[v] = append(samples[v], time.Since(start))
		}
	}
	fmt.Printf("latency of /bin/true, %d interleaved rounds, %d CPUs, pool of %d (ms):\n", *rounds, cpus, *poolMax)
	fmt.Printf("  %-26s %8s %8s %8s\n", "", "median", "p99", "x bare")
	bare := percentile(samples[0], 50)
	for i, v := range variants {
		med := percentile(samples[i], 50)
		fmt.Printf("  %-26s %8.2f %8.2f %8.2f\n", v.name, ms(med), ms(percentile(samples[i], 99)), float64(med)/float64(bare))
	}

	latencyClient.printStages()

	fmt.Printf("throughput of /bin/true, %d alternating rounds of %.0f s each, order flipped each round\n", *tputRounds, *seconds)
	fmt.Printf("(medians; runs/s; CPU ms per run: the service process with its boxes and clients, or the\n")
	fmt.Printf("one-shot processes with theirs; ratio: of the medians, with the rounds' own in brackets):\n")
	fmt.Printf("  %-8s %10s %8s %12s %8s %8s\n", "clients", "service", "CPU", "one-shot", "CPU", "ratio")
	for _, clients := range []int{1, 2, 4} {
		var api, apiCPU, one, oneCPU, ratios []float64
		for r := 0; r < *tputRounds; r++ {
			measureAPI := func() {
				n, cpu := throughput(clients, *seconds, func() func() error { return newAPIClient(sock).post })
				api, apiCPU = append(api, n), append(apiCPU, cpu)
			}
			measureOne := func() {
				n, cpu := throughput(clients, *seconds, func() func() error {
					return func() error { return spawn([]string{*isolateBin, "run", "--", "/bin/true"}) }
				})
				one, oneCPU = append(one, n), append(oneCPU, cpu)
			}
			if r%2 == 0 {
				measureAPI()
				measureOne()
			} else {
				measureOne()
				measureAPI()
			}
			ratios = append(ratios, api[r]/one[r])
		}
		each := make([]string, len(ratios))
		for i, x := range ratios {
			each[i] = fmt.Sprintf("%.2f", x)
		}
		fmt.Printf("  %-8d %10.1f %8.2f %12.1f %8.2f %8.2f  [%s]\n", clients, median(api), median(apiCPU),
			median(one), median(oneCPU), median(api)/median(one), strings.Join(each, " "))
	}
	return nil
}

// cpuTime is the CPU time of this process and of its children, reaped
// or alive (their own and their reaped children's). Read at both ends of
// a measurement, a child alive at either end counts once: the inits of
// the boxes built ahead, which a measurement's end finds built, not yet
// reaped, and the next one finds used.
func cpuTime() time.Duration {
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

// liveCPU is utime+stime+cutime+cstime of process pid (0 once reaped).
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
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// spawn runs argv and waits for it, the way a caller execs a sandbox.
func spawn(argv []string) error {
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Files: []uintptr{devNull.Fd(), devNull.Fd(), devNull.Fd()}})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	for {
		_, err = syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return err
	}
	if ws.ExitStatus() != 0 {
		return fmt.Errorf("%s: exit status %d", strings.Join(argv, " "), ws.ExitStatus())
	}
	return nil
}

// apiClient posts /bin/true over one keep-alive connection, and keeps
// the answers (read after the timing, by printStages).
type apiClient struct {
	c       *http.Client
	answers [][]byte
}

func newAPIClient(sock string) *apiClient {
	return &apiClient{c: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 1,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}}
}

func (a *apiClient) post() error {
	resp, err := a.c.Post("http://isolate/v1/run", "application/json", strings.NewReader(benchRequest))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"status":"OK"`) {
		return fmt.Errorf("%d %s", resp.StatusCode, body)
	}
	a.answers = append(a.answers, body)
	return nil
}

// printStages prints the median of each stage of the reports.
func (a *apiClient) printStages() {
	stages := map[string][]time.Duration{}
	claimed := 0
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
		if _, ok := sb.Stages["claim"]; ok {
			claimed++
		}
		sb.Stages["(setup_time)"], sb.Stages["(teardown_time)"] = sb.SetupTime, sb.TeardownTime
		for k, v := range sb.Stages {
			stages[k] = append(stages[k], time.Duration(v*1e9))
		}
	}
	fmt.Printf("service runs in a box built ahead: %d of %d; median stages (ms):\n", claimed, len(a.answers))
	names := make([]string, 0, len(stages))
	for k := range stages {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Printf("  %-20s %8.3f  (%d runs)\n", k, ms(percentile(stages[k], 50)), len(stages[k]))
	}
}

// throughput is runs per second with clients callers looping for the
// given time; each caller gets its own runner from newRunner.
func throughput(clients int, seconds float64, newRunner func() func() error) (perSecond, cpuMs float64) {
	var n atomic.Int64
	cpu0 := cpuTime()
	deadline := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := newRunner()
			for time.Now().Before(deadline) {
				if run() == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	runs := float64(max(n.Load(), 1))
	return float64(n.Load()) / took.Seconds(), ms(cpuTime()-cpu0) / runs
}

func percentile(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, len(s)*p/100)]
}

func median(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

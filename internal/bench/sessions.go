package bench

// `isolate bench --sessions`: sessions of a service of its own, measured
// as agent platforms publish theirs. Time to interactive by ComputeSDK's
// method (create a session, run `python3 -V` in it, delete it; sequential
// and in bursts of 20 concurrent), beside the same command run bare in
// the same rounds; a command's and run_code("1+1")'s latency inside a live
// session; density: the memory an idle session holds beyond its
// interpreter, and sessions created and deleted per second of CPU. No
// network hop is counted: the client is on the service's unix socket.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// SessionsConfig is what `isolate bench --sessions` measures.
type SessionsConfig struct {
	Bin, ServeBin, Version string
	Rounds                 int // sequential rounds
	Bursts                 int // bursts of BurstSize concurrent sessions
	BurstSize              int
	Idle                   int     // idle sessions held for the density figure
	Seconds                float64 // create-and-delete throughput measurement
}

// SessionsResult is what it measured (milliseconds unless named).
type SessionsResult struct {
	Machine     machineInfo `json:"machine"`
	Rounds      int         `json:"rounds"`
	Bare        dist        `json:"bare_python3_V_ms"`
	TTI         dist        `json:"time_to_interactive_ms"`
	TTIP99      float64     `json:"time_to_interactive_p99_ms"`
	TTIOverBare float64     `json:"tti_median_minus_bare_ms"`
	Burst       dist        `json:"burst_time_to_interactive_ms"`
	BurstP99    float64     `json:"burst_time_to_interactive_p99_ms"`
	BurstSize   int         `json:"burst_size"`
	Command     dist        `json:"command_true_in_session_ms"`
	RunCode     dist        `json:"run_code_1_plus_1_ms"`
	// IdleKiB is the memory one idle session holds (its python context
	// started), beyond its interpreter's own: the service's growth and the
	// box's own processes (proportional set sizes), per session.
	IdleKiB        float64 `json:"idle_session_kib_beyond_interpreter"`
	InterpreterKiB float64 `json:"interpreter_kib"`
	Idle           int     `json:"idle_sessions"`
	// PerCPUSecond is sessions created and deleted per second of CPU of
	// the whole machine's work for them (the service and its boxes).
	PerCPUSecond float64 `json:"sessions_per_cpu_second"`
	PerSecond    float64 `json:"sessions_per_second"`
}

// sessionClient speaks to the service's API on one kept-alive connection.
type sessionClient struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialSessions(sock string) (*sessionClient, error) {
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("the service's API: %w", err)
	}
	return &sessionClient{conn: conn, r: bufio.NewReader(conn)}, nil
}

func (c *sessionClient) call(method, path, body string, want int, out any) error {
	status, answer, err := sendRequest(c.conn, c.r, method, "isolate", path, body)
	if err != nil {
		return err
	}
	if status != want {
		return fmt.Errorf("%s %s: %d %s", method, path, status, answer)
	}
	if out != nil {
		return json.Unmarshal(answer, out)
	}
	return nil
}

func (c *sessionClient) create() (string, error) {
	var s struct {
		ID string `json:"id"`
	}
	err := c.call("POST", "/v1/sessions", `{}`, 201, &s)
	return s.ID, err
}

func (c *sessionClient) command(id string, args ...string) error {
	body, _ := json.Marshal(map[string]any{"args": args})
	var rep struct {
		Status string `json:"status"`
	}
	if err := c.call("POST", "/v1/sessions/"+id+"/commands", string(body), 200, &rep); err != nil {
		return err
	}
	if rep.Status != "OK" {
		return fmt.Errorf("%v in a session: %s", args, rep.Status)
	}
	return nil
}

func (c *sessionClient) runCode(id, code string) (string, error) {
	body, _ := json.Marshal(map[string]any{"code": code})
	var ex struct {
		Result *string `json:"result"`
		Error  *struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"error"`
	}
	if err := c.call("POST", "/v1/sessions/"+id+"/code", string(body), 200, &ex); err != nil {
		return "", err
	}
	if ex.Error != nil {
		return "", fmt.Errorf("run_code: %s: %s", ex.Error.Name, ex.Error.Value)
	}
	if ex.Result == nil {
		return "", nil
	}
	return *ex.Result, nil
}

func (c *sessionClient) remove(id string) error {
	return c.call("DELETE", "/v1/sessions/"+id, "", 204, nil)
}

// interactive is ComputeSDK's time to interactive: create, run, delete.
func (c *sessionClient) interactive() (time.Duration, error) {
	start := time.Now()
	id, err := c.create()
	if err != nil {
		return 0, err
	}
	err = c.command(id, "python3", "-V")
	if derr := c.remove(id); err == nil {
		err = derr
	}
	return time.Since(start), err
}

// RunSessions starts a service of its own and measures.
func RunSessions(c SessionsConfig) (*SessionsResult, error) {
	svc, err := startService(c.ServeBin, c.Bin, "--max-sessions", strconv.Itoa(max(c.Idle, c.BurstSize)+8),
		"--max-sessions-per-caller", strconv.Itoa(max(c.Idle, c.BurstSize)+8), "--parallel", strconv.Itoa(c.BurstSize))
	if err != nil {
		return nil, err
	}
	defer svc.stop()
	sock := filepath.Join(svc.dir, "api.sock")
	cl, err := dialSessions(sock)
	if err != nil {
		return nil, err
	}
	defer cl.conn.Close()
	res := &SessionsResult{Machine: describeMachine(c.Version, 0), Rounds: c.Rounds, BurstSize: c.BurstSize, Idle: c.Idle}
	// The python3 a box finds: the same binary, bare and in a session.
	python := ""
	for _, dir := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
		if p := filepath.Join(dir, "python3"); unix.Access(p, unix.X_OK) == nil {
			python = p
			break
		}
	}
	if python == "" {
		return nil, errors.New("no python3 in /usr/local/bin, /usr/bin or /bin: the sessions' figures are python3's")
	}

	// Sequential, interleaved with the same command run bare.
	var bare, tti []float64
	for i := 0; i < c.Rounds; i++ {
		start := time.Now()
		if err := exec.Command(python, "-V").Run(); err != nil {
			return nil, err
		}
		bare = append(bare, ms(time.Since(start)))
		d, err := cl.interactive()
		if err != nil {
			return nil, err
		}
		tti = append(tti, ms(d))
	}
	res.Bare, res.TTI = summarize(bare), summarize(tti)
	res.TTIP99, res.TTIOverBare = p99(tti), res.TTI.Median-res.Bare.Median

	// Bursts: BurstSize clients at once, each on its own connection.
	var burst []float64
	for b := 0; b < c.Bursts; b++ {
		times, err := burstOf(sock, c.BurstSize)
		if err != nil {
			return nil, err
		}
		burst = append(burst, times...)
	}
	res.Burst, res.BurstP99 = summarize(burst), p99(burst)

	// Inside a live session.
	id, err := cl.create()
	if err != nil {
		return nil, err
	}
	if v, err := cl.runCode(id, "1+1"); err != nil || v != "2" {
		return nil, fmt.Errorf("run_code(1+1) gave %q: %v", v, err)
	}
	var cmd, code []float64
	for i := 0; i < c.Rounds; i++ {
		start := time.Now()
		if err := cl.command(id, "true"); err != nil {
			return nil, err
		}
		cmd = append(cmd, ms(time.Since(start)))
		start = time.Now()
		if _, err := cl.runCode(id, "1+1"); err != nil {
			return nil, err
		}
		code = append(code, ms(time.Since(start)))
	}
	res.Command, res.RunCode = summarize(cmd), summarize(code)
	if err := cl.remove(id); err != nil {
		return nil, err
	}

	if err := idleDensity(cl, svc, res, c.Idle); err != nil {
		return nil, err
	}
	if err := createDeleteRate(sock, res, c.Seconds); err != nil {
		return nil, err
	}
	return res, nil
}

func p99(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	return quantile(sorted, 0.99)
}

// burstOf runs n time-to-interactive rounds at once.
func burstOf(sock string, n int) ([]float64, error) {
	times := make([]float64, n)
	err := eachClient(sock, n, func(i int, cl *sessionClient) error {
		d, err := cl.interactive()
		times[i] = ms(d)
		return err
	})
	return times, err
}

// eachClient runs fn for n clients at once, each on a connection of its
// own.
func eachClient(sock string, n int, fn func(i int, cl *sessionClient) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cl, err := dialSessions(sock)
			if err != nil {
				errs[i] = err
				return
			}
			defer cl.conn.Close()
			errs[i] = fn(i, cl)
		}(i)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// idleDensity holds n sessions, each with its python context started, and
// measures what they hold: the service's growth plus the proportional set
// sizes of each box's own processes, less its interpreter's.
func idleDensity(cl *sessionClient, svc *service, res *SessionsResult, n int) error {
	pid := strconv.Itoa(svc.cmd.Process.Pid)
	settle := func() { time.Sleep(200 * time.Millisecond) }
	settle()
	before := pssKiB(pid)
	ids := make([]string, 0, n)
	defer func() {
		for _, id := range ids {
			cl.remove(id)
		}
	}()
	for i := 0; i < n; i++ {
		id, err := cl.create()
		if err != nil {
			return err
		}
		ids = append(ids, id)
		if _, err := cl.runCode(id, "1+1"); err != nil {
			return err
		}
	}
	settle()
	service := pssKiB(pid) - before
	var boxes, interpreters float64
	for _, child := range childrenOf(pid) {
		for _, p := range descendants(child) {
			kib := pssKiB(p)
			if isInterpreter(p) {
				interpreters += kib
			} else {
				boxes += kib
			}
		}
	}
	res.IdleKiB = (service + boxes) / float64(n)
	res.InterpreterKiB = interpreters / float64(n)
	return nil
}

// createDeleteRate creates and deletes sessions from two clients for
// seconds, against the CPU the service and its boxes spent.
func createDeleteRate(sock string, res *SessionsResult, seconds float64) error {
	cpu0, start := treeCPU(), time.Now()
	deadline := start.Add(time.Duration(seconds * float64(time.Second)))
	var count atomic.Int64
	err := eachClient(sock, 2, func(_ int, cl *sessionClient) error {
		for time.Now().Before(deadline) {
			id, err := cl.create()
			if err == nil {
				err = cl.remove(id)
			}
			if err != nil {
				return err
			}
			count.Add(1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	wall, cpu := time.Since(start), treeCPU()-cpu0
	res.PerSecond = float64(count.Load()) / wall.Seconds()
	res.PerCPUSecond = float64(count.Load()) / cpu.Seconds()
	return nil
}

// pssKiB is process pid's proportional set size (0 once gone).
func pssKiB(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}

func childrenOf(pid string) []string {
	var out []string
	lists, _ := filepath.Glob("/proc/" + pid + "/task/*/children")
	for _, l := range lists {
		b, _ := os.ReadFile(l)
		out = append(out, strings.Fields(string(b))...)
	}
	return out
}

// descendants is pid and every process below it.
func descendants(pid string) []string {
	out := []string{pid}
	for _, c := range childrenOf(pid) {
		out = append(out, descendants(c)...)
	}
	return out
}

func isInterpreter(pid string) bool {
	b, _ := os.ReadFile("/proc/" + pid + "/comm")
	return strings.HasPrefix(strings.TrimSpace(string(b)), "python")
}

// PrintSessions prints the sessions' figures.
func PrintSessions(w io.Writer, r *SessionsResult) {
	m := r.Machine
	fmt.Fprintf(w, "isolate bench --sessions · %d CPUs · %s · Linux %s · cgroup %s · load %s · %s\n\n", m.CPUs, m.CPUModel, m.Kernel, m.Cgroup, m.Load, m.Date)
	fmt.Fprintf(w, "time to interactive (create, python3 -V, delete), %d sequential rounds:\n", r.Rounds)
	fmt.Fprintf(w, "  session           median %7.2f ms   p99 %7.2f ms\n", r.TTI.Median, r.TTIP99)
	fmt.Fprintf(w, "  bare python3 -V   median %7.2f ms   (session - bare: %+.2f ms)\n", r.Bare.Median, r.TTIOverBare)
	fmt.Fprintf(w, "  bursts of %d      median %7.2f ms   p99 %7.2f ms\n", r.BurstSize, r.Burst.Median, r.BurstP99)
	fmt.Fprintf(w, "inside a live session:\n")
	fmt.Fprintf(w, "  command true      median %7.2f ms\n", r.Command.Median)
	fmt.Fprintf(w, "  run_code(\"1+1\")   median %7.2f ms\n", r.RunCode.Median)
	fmt.Fprintf(w, "density (%d idle sessions, a python context each):\n", r.Idle)
	fmt.Fprintf(w, "  per session beyond its interpreter %8.0f KiB (interpreter %0.f KiB)\n", r.IdleKiB, r.InterpreterKiB)
	fmt.Fprintf(w, "  created and deleted               %8.1f /s, %.1f per CPU-second\n", r.PerSecond, r.PerCPUSecond)
	fmt.Fprintf(w, "(no network hop counted: the client is on the service's unix socket)\n")
}

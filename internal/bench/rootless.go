package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/isolate-sandbox/isolate/api"
)

// The rootless benchmark: `isolate run -- /bin/true` by a user who is not
// root (an unprivileged user namespace of the user's; the limits from a
// delegated cgroup, else rlimits), in-process and handed over to a
// service the user runs for itself, against unprivileged
// `bwrap --unshare-all` run by the same user, and a bare exec, in
// interleaved rounds. Run by root, the commands run as nobody.

// Names of the rootless variants.
const (
	VarRootlessIsolate = "isolate run (without root)"
	VarRootlessService = "isolate run (without root), via its service"
	VarRootlessBwrap   = "bwrap --unshare-all (without root)"
)

// RootlessConfig says what the rootless benchmark runs.
type RootlessConfig struct {
	Bin      string // the isolate binary, readable by the user
	ServeBin string // the isolate-serve the user starts for itself ("": none)
	Version  string
	Rounds   int
	Seed     uint64 // the running order's seed
}

// RootlessResult is the rootless benchmark's outcome.
type RootlessResult struct {
	Version string `json:"version"`
	UID     int    `json:"uid"`
	Rounds  int    `json:"rounds"`
	Seed    uint64 `json:"seed"` // of the rounds' random order
	// Variants: a bare exec, isolate version, isolate's run, bwrap's
	// (skipped where bwrap is missing); ratios to bwrap's median.
	Variants []VariantResult `json:"variants"`
	// Limits is how the isolate run enforced its limits (its report's
	// sandbox.limits); bwrap enforces none.
	Limits map[string]string `json:"limits"`
}

// rootlessUser is who runs the commands when the bench runs as root.
const rootlessUser = 65534

// RunRootless runs the rootless benchmark.
func RunRootless(c RootlessConfig) (*RootlessResult, error) {
	if c.Rounds < 1 {
		return nil, errors.New("rounds must be 1 or more")
	}
	res := &RootlessResult{Version: c.Version, UID: os.Getuid(), Rounds: c.Rounds, Seed: c.Seed}
	var cred *syscall.Credential
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "ISOLATE_NO_SERVICE=1"}
	if os.Getuid() == 0 {
		// The user's own TMPDIR: isolate keeps its box locks there.
		tmp, err := os.MkdirTemp("", "isolate-bench-rootless-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		if err := os.Chown(tmp, rootlessUser, rootlessUser); err != nil {
			return nil, err
		}
		cred = &syscall.Credential{Uid: rootlessUser, Gid: rootlessUser}
		res.UID = rootlessUser
		env = append(env, "TMPDIR="+tmp)
	} else {
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "TMPDIR=") || strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
				env = append(env, kv)
			}
		}
	}
	// With a CPU limit too, so that every limit bwrap lacks is on.
	isolateArgv := []string{c.Bin, "run", "--allow-rlimit-only", "--time", "10", "--", "/bin/true"}
	vs := []variant{
		{name: VarBare, argv: []string{"/bin/true"}},
		// The floor of any isolate command (exec, Go's start, exit).
		{name: VarCLI, argv: []string{c.Bin, "version"}},
		{name: VarRootlessIsolate, argv: isolateArgv},
	}
	skipped := map[string]string{}
	if bwrap, err := findBwrap(); err != nil {
		skipped[VarRootlessBwrap] = err.Error()
	} else {
		vs = append(vs, variant{name: VarRootlessBwrap, argv: BwrapArgs(bwrap)})
	}
	// The same run, handed over to a service the user started for itself
	// (found where the CLI looks: the user's own directory).
	var svcEnv []string
	if c.ServeBin == "" {
		skipped[VarRootlessService] = "no isolate-serve (--serve-binary)"
	} else {
		svcEnv = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "ISOLATE_NO_SERVICE=") })
		stop, err := startOwnService(c, svcEnv, cred)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", VarRootlessService, err)
		}
		defer stop()
		vs = append(vs, variant{name: VarRootlessService, argv: isolateArgv, env: svcEnv})
	}
	// The report says how the limits were enforced (once, untimed).
	out, err := asUser(append(isolateArgv[:len(isolateArgv)-2:len(isolateArgv)-2], "--json", "--", "/bin/true"), env, cred)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", VarRootlessIsolate, err)
	}
	var rep api.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, fmt.Errorf("%s: no report: %w", VarRootlessIsolate, err)
	}
	res.Limits = rep.Sandbox.Limits

	wall, cpu := map[string][]float64{}, map[string][]float64{}
	o := newOrder(c.Seed)
	for round := -warmupRounds; round < c.Rounds; round++ {
		for _, i := range o.next(len(vs)) {
			v := vs[i]
			start := time.Now()
			cmd := exec.Command(v.argv[0], v.argv[1:]...)
			cmd.Env = env
			if v.env != nil {
				cmd.Env = v.env
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			if err := cmd.Run(); err != nil {
				_, err = asUser(v.argv, cmd.Env, cred)
				return nil, fmt.Errorf("%s: %w", v.name, err)
			}
			if round < 0 {
				continue
			}
			wall[v.name] = append(wall[v.name], ms(time.Since(start)))
			cpu[v.name] = append(cpu[v.name], ms(cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime()))
		}
	}
	bwrapMedian := median(wall[VarRootlessBwrap])
	for _, v := range vs {
		sum := summarize(wall[v.name])
		cmd := v.argv
		if v.name == VarRootlessIsolate || v.name == VarRootlessService || v.name == VarCLI {
			cmd = append([]string{"isolate"}, v.argv[1:]...)
		}
		res.Variants = append(res.Variants, VariantResult{Name: v.name, Command: cmd, WallMs: sum, CPUMs: summarize(cpu[v.name]), RatioToBwrap: ratio(sum.Median, bwrapMedian)})
	}
	for name, why := range skipped {
		res.Variants = append(res.Variants, VariantResult{Name: name, Skipped: why})
	}
	return res, nil
}

// startOwnService starts c.ServeBin as the user (cred; nil: this
// process's) with env, at its default sockets in the user's own
// directory, enforcing the limits as the in-process runs do, and waits
// until a run is handed over to it; stop ends it.
func startOwnService(c RootlessConfig, env []string, cred *syscall.Credential) (stop func(), err error) {
	cmd := exec.Command(c.ServeBin, "--allow-rlimit-only", "--cli-binary", c.Bin)
	cmd.Env = env
	var log strings.Builder
	cmd.Stderr = &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	probe := []string{c.Bin, "run", "--allow-rlimit-only", "--json", "--", "/bin/true"}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("isolate-serve exited (%v): %s", err, strings.TrimSpace(log.String()))
		default:
		}
		if out, err := asUser(probe, env, cred); err == nil {
			var rep api.Report
			if json.Unmarshal(out, &rep) == nil && rep.Sandbox.Via == "service" {
				return stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("runs were not handed over to it within 30 s: %s", strings.TrimSpace(log.String()))
		}
	}
}

// asUser runs argv once as cred (nil: this process's user) and returns
// its standard output, or an error with what it said.
func asUser(argv, env []string, cred *syscall.Credential) ([]byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(errb.String()))
	}
	return out, nil
}

// PrintRootless prints the rootless benchmark as a table.
func PrintRootless(w io.Writer, res *RootlessResult) {
	fmt.Fprintf(w, "isolate %s, without root (uid %d), /bin/true, %d interleaved rounds, each in a random order (--seed %d)\n\n", res.Version, res.UID, res.Rounds, res.Seed)
	fmt.Fprintf(w, "%-46s %10s %10s %10s %9s\n", "variant", "median ms", "p90 ms", "cpu ms", "x bwrap")
	for _, v := range res.Variants {
		if v.Skipped != "" {
			fmt.Fprintf(w, "%-46s skipped: %s\n", v.Name, v.Skipped)
			continue
		}
		fmt.Fprintf(w, "%-46s %10.2f %10.2f %10.2f %9.2f\n", v.Name, v.WallMs.Median, v.WallMs.P90, v.CPUMs.Median, v.RatioToBwrap)
	}
	var limits []string
	for _, k := range []string{"memory", "pids", "cpu", "cpus", "wall"} {
		if how, ok := res.Limits[k]; ok {
			limits = append(limits, k+"="+how)
		}
	}
	fmt.Fprintf(w, "\nisolate's limits (sandbox.limits of its report): %s; bwrap enforces none.\n", strings.Join(limits, " "))
}

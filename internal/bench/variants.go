package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
)

// benchRunner starts and times the commands the benchmarks compare. bin is
// the isolate binary under test: /proc/self/exe for `isolate bench`, the
// built binary for `go test -bench`.
type benchRunner struct {
	bin     string
	version string // of the binary, for the machine description
	// env is the isolate commands' environment: the bench's own, with
	// ISOLATE_NO_SERVICE=1 (the one-shot path measured here) unless a
	// bench of the service's path says otherwise.
	env []string
	// peers are the other sandboxes the latency rounds measure.
	peers Peers
	// order is the running order of rounds and blocks.
	order *order
}

// oneShotEnv is the environment of a one-shot isolate command: the
// bench's own, never handed to a running service.
func oneShotEnv() []string { return append(os.Environ(), "ISOLATE_NO_SERVICE=1") }

// variant is one way of running /bin/true that the latency rounds compare.
type variant struct {
	name string
	argv []string
	// isolate marks the isolate run, whose JSON report carries its stage
	// timers.
	isolate bool
	// run, when set, runs it instead (argv then only names it).
	run func(out *sink) (sample, error)
	// env, when set, is its environment instead of the bench's.
	env []string
}

// Names of the variants, as printed and in the JSON output.
const (
	VarBare    = "bare exec"
	VarCLI     = "isolate version"
	VarIsolate = "isolate run"
	// The same run without a syscall filter: the difference is what the
	// default seccomp policy costs per run.
	varNoSeccomp = "isolate run --seccomp none"
	// The same run with a network allowlist: its proxy's listener made in
	// the box's network namespace, served and closed.
	varAllowlist = "isolate run --net allow:..."
	VarBwrap     = "bwrap"
	VarUnshare   = "unshare -Urnpimf"
)

// variants lists what the latency rounds run, with a note for each one that
// cannot run on this host.
func (r *benchRunner) variants() (vs []variant, skipped map[string]string) {
	skipped = map[string]string{}
	vs = append(vs,
		variant{name: VarBare, argv: []string{"/bin/true"}},
		// The floor of any isolate command: exec of the binary, the Go
		// runtime's start, package initialisation, exit.
		variant{name: VarCLI, argv: []string{r.bin, "version"}},
		variant{name: VarIsolate, argv: r.isolateArgs(nil, "/bin/true"), isolate: true},
		variant{name: varNoSeccomp, argv: r.isolateArgs([]string{"--seccomp", "none"}, "/bin/true")},
		variant{name: varAllowlist, argv: r.isolateArgs([]string{"--net", "allow:pkgs.example.org,*.example.com:443"}, "/bin/true")},
	)
	if bwrap, err := findBwrap(); err != nil {
		skipped[VarBwrap] = err.Error()
	} else {
		vs = append(vs, variant{name: VarBwrap, argv: BwrapArgs(bwrap)})
	}
	if unshare, err := exec.LookPath("unshare"); err != nil {
		skipped[VarUnshare] = "unshare not found (apt-get install util-linux)"
	} else {
		vs = append(vs, variant{name: VarUnshare, argv: []string{unshare, "-Urnpimf", "/bin/true"}})
	}
	return vs, skipped
}

// isolateArgs is `isolate run --json OPTS -- COMMAND...`, as a user types
// it.
func (r *benchRunner) isolateArgs(opts []string, command ...string) []string {
	argv := append([]string{r.bin, "run", "--json"}, opts...)
	return append(append(argv, "--"), command...)
}

// BwrapArgs runs /bin/true under bubblewrap the way a minimal sandbox
// would: every namespace, a read-only /usr with the host's merged-/usr
// symlinks (or read-only binds where they are directories), /proc, /dev
// and a tmpfs /tmp.
func BwrapArgs(bwrap string) []string {
	args := []string{bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr"}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				args = append(args, "--symlink", target, d)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", d, d)
		}
	}
	return append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", "/bin/true")
}

// findBwrap finds bwrap. The bench installs nothing: without bwrap its
// variant is skipped, saying which package has it (scripts/setup.sh
// installs it).
func findBwrap() (string, error) {
	p, err := exec.LookPath("bwrap")
	if err != nil {
		return "", errors.New("bwrap not found (apt-get install bubblewrap)")
	}
	return p, nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// sink receives the standard output of timed runs: a memory file, so that
// no pipe and no copying goroutine sit on the timed path.
type sink struct{ f *os.File }

func newSink() (*sink, error) {
	fd, err := unix.MemfdCreate("isolate-bench", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	return &sink{f: os.NewFile(uintptr(fd), "isolate-bench")}, nil
}

// take returns what was written since the last take and empties the file.
func (s *sink) take() []byte {
	s.f.Seek(0, io.SeekStart)
	b, _ := io.ReadAll(s.f)
	s.f.Truncate(0)
	s.f.Seek(0, io.SeekStart)
	return b
}

func (s *sink) Close() error { return s.f.Close() }

// sample is what one run cost.
type sample struct {
	// wall is the time from fork to reaping.
	wall time.Duration
	// cpu is the user and system time of the command and every
	// descendant it reaped (wait4's rusage): isolate's supervisor, init
	// and the program; bwrap and its children. Kernel work deferred to
	// worker threads (freeing a network namespace) is not in it.
	cpu time.Duration
}

// timed runs argv once in environment env (nil: the bench's own), its
// standard output into out (nil: /dev/null),
// and returns what it cost. A failure is an error naming the command,
// with what it said.
func timed(argv, env []string, out *sink) (sample, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if out != nil {
		cmd.Stdout = out.f
	}
	start := time.Now()
	err := cmd.Start()
	if err == nil {
		err = cmd.Wait()
	}
	took := sample{wall: time.Since(start)}
	if cmd.ProcessState != nil {
		took.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && out == nil {
			// Run it again for its message: the timed run kept none.
			again := exec.Command(argv[0], argv[1:]...)
			again.Env = env
			msg, _ := again.CombinedOutput()
			return took, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, lastLine(msg))
		}
		if !errors.As(err, &ee) {
			return took, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
		}
		// isolate's own exit status is judged from its report.
	}
	return took, nil
}

// isolateRun runs argv (an `isolate run --json` command line) once and
// returns its cost seen from outside and its report.
func (r *benchRunner) isolateRun(argv []string, out *sink) (sample, *isolate.Report, error) {
	took, err := timed(argv, r.env, out)
	if err != nil {
		return took, nil, err
	}
	data := out.take()
	var rep isolate.Report
	if err := json.Unmarshal(bytes.TrimSpace(data), &rep); err != nil {
		return took, nil, fmt.Errorf("%s: no JSON report (%v): %q", strings.Join(argv, " "), err, data)
	}
	if rep.Status == isolate.StatusXX {
		return took, &rep, fmt.Errorf("%s: sandbox failure: %s", strings.Join(argv, " "), rep.Message)
	}
	return took, &rep, nil
}

// isolateTrue runs `isolate run -- /bin/true` once and insists it
// succeeded.
func (r *benchRunner) isolateTrue(out *sink) (sample, *isolate.Report, error) {
	argv := r.isolateArgs(nil, "/bin/true")
	took, rep, err := r.isolateRun(argv, out)
	if err == nil && rep.Status != isolate.StatusOK {
		err = fmt.Errorf("%s: status %s: %s", strings.Join(argv, " "), rep.Status, rep.Message)
	}
	return took, rep, err
}

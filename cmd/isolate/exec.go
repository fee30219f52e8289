package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/langs"
	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/seccomp"
)

func init() { extraCommands = append(extraCommands, execCommand()) }

// execDirs holds the host directories that are the /box of an exec: the
// compiler's output has to outlive the compile box to reach the run box.
// Each is removed when its exec ends; one whose exec died is removed by
// the next exec.
const execDirs = "/run/isolate/exec"

// execReport is exec's JSON report (CONTRACT.md): the outcome, and the
// report of each phase that ran (null when it did not).
type execReport = api.ExecReport

func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "compile (if the language compiles) and run one source file",
		ArgsUsage: "--lang LANG [options] SOURCE [-- ARG...]",
		Flags:     runFlags(),
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageErr(err)
		},
		Action: execAction,
	}
}

// execJob is one exec: the language, the run's spec, the source.
type execJob struct {
	host   *isolate.Host
	lang   *langs.Lang
	spec   *isolate.Spec // the run phase; the compile phase derives from it
	source string
	dir    string // host directory bound as /box in both phases
}

func execAction(c *cli.Context) error {
	if err := requireRoot(); err != nil {
		return err
	}
	// What exec creates (the box directory, the source, init's mount
	// points) must be readable by the box user, whatever the caller's
	// umask.
	unix.Umask(0o022)
	job, err := newExecJob(c)
	if err != nil {
		return usageErr(err)
	}
	stdio, closeFiles, err := stdioFromFlags()
	defer closeFiles()
	if err != nil {
		return usageErr(err)
	}
	ctx, stop := signalContext()
	defer stop()
	rep, err := job.execute(ctx, stdio)
	if err != nil {
		return usageErr(err)
	}
	if err := emitExecReport(c, rep); err != nil {
		return &exitError{code: exitSandbox, msg: err.Error()}
	}
	return &exitError{code: exitStatus(rep.Status)}
}

// newExecJob checks the command line; nothing is created yet.
func newExecJob(c *cli.Context) (*execJob, error) {
	if runValues.lang == "" {
		return nil, errors.New("exec: --lang is required (isolate langs lists the languages)")
	}
	if c.Args().Len() == 0 {
		return nil, errors.New("exec: no source file (isolate exec --lang LANG [options] SOURCE [-- ARG...])")
	}
	source := c.Args().First()
	fi, err := os.Stat(source)
	if err != nil {
		return nil, fmt.Errorf("exec: source %s: %v", source, errors.Unwrap(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("exec: source %s is not a regular file", source)
	}
	req, err := specFromFlags(c)
	if err != nil {
		return nil, err
	}
	req.Args = []string{"exec"} // the language's run command, below
	host, err := isolate.NewHost(nil)
	if err != nil {
		return nil, err
	}
	spec, err := host.Resolve(req)
	if err != nil {
		return nil, flagError(err)
	}
	lang, err := langFromFlags(c)
	if err != nil {
		return nil, err
	}
	if err := applyLimits(spec, lang.RunLimits, c.IsSet); err != nil {
		return nil, fmt.Errorf("language %s: run limits: %v", lang.Name, err)
	}
	if spec.BoxDir != "" {
		return nil, fmt.Errorf("exec: box %d is a persistent box (isolate init); exec makes a box of its own, give another --box-id", spec.BoxID)
	}
	args := c.Args().Tail()
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	spec.Command = append(phaseVars(spec).Expand(lang.Run), args...)
	spec.Env = phaseVars(spec).Expand(spec.Env)
	return &execJob{host: host, lang: lang, spec: spec, source: source}, nil
}

// execute runs the phases in one box directory, and always removes it.
func (j *execJob) execute(ctx context.Context, stdio isolate.IO) (*execReport, error) {
	sweepExecDirs()
	if j.spec.ImageFile != "" {
		// One mount for both phases: the run finds in the page cache
		// what the compiler already read.
		m, err := rootfs.OpenImage(j.spec.ImageFile)
		if err != nil {
			return &execReport{Status: isolate.StatusXX, Run: sandboxFailure(j.spec, err)}, nil
		}
		defer m.Close()
		j.spec.ImageMount = m
	}
	dir, err := j.makeDir()
	if dir != "" {
		defer os.RemoveAll(dir)
	}
	if err != nil {
		return &execReport{Status: isolate.StatusXX, Run: sandboxFailure(j.spec, err)}, nil
	}
	j.dir = dir
	j.spec.BoxDir = dir
	rep := &execReport{}
	if j.lang.Compiled() {
		cspec, err := j.compileSpec()
		if err != nil {
			return nil, err
		}
		crep, err := j.run(ctx, cspec, isolate.IO{})
		if err != nil {
			return nil, err
		}
		rep.Compile = crep
		switch crep.Status {
		case isolate.StatusOK:
			if j.spec.BoxID < 0 {
				// The run may get another box (another uid) than the
				// compiler had: what the compiler wrote must be readable
				// and runnable by it, whatever the umask.
				if err := openToAll(dir); err != nil {
					rep.Status = isolate.StatusXX
					rep.Run = sandboxFailure(j.spec, fmt.Errorf("share the compiler's output: %w", err))
					return rep, nil
				}
			}
		case isolate.StatusXX:
			rep.Status = isolate.StatusXX
			return rep, nil
		default:
			rep.Status = isolate.StatusCE
			crep.Message = compileMessage(crep)
			return rep, nil
		}
	}
	rrep, err := j.run(ctx, j.spec, stdio)
	if err != nil {
		return nil, err
	}
	if !j.lang.Compiled() && j.lang.SyntaxErrorExit != 0 && rrep.Status == isolate.StatusRE && rrep.ExitCode == j.lang.SyntaxErrorExit {
		// The language checks its source in the run's own process: it
		// did not compile, and nothing of it ran.
		rrep.Status = isolate.StatusCE
		rrep.Message = compileMessage(rrep)
		return &execReport{Status: isolate.StatusCE, Compile: rrep}, nil
	}
	rep.Run = rrep
	rep.Status = rrep.Status
	return rep, nil
}

// run runs one phase.
func (j *execJob) run(ctx context.Context, spec *isolate.Spec, stdio isolate.IO) (*isolate.Report, error) {
	p, err := j.host.PrepareSpec(spec)
	if err != nil {
		return nil, err
	}
	return p.Run(ctx, stdio)
}

// makeDir creates the box directory and puts the source in it under the
// language's file name. The box user owns it when the box id is known;
// otherwise each phase may get another id (another uid), so it is open to
// all of them (its parent is root's alone on the host).
func (j *execJob) makeDir() (string, error) {
	if err := os.MkdirAll(execDirs, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", execDirs, err)
	}
	dir, err := os.MkdirTemp(execDirs, strconv.Itoa(os.Getpid())+".")
	if err != nil {
		return "", fmt.Errorf("create the box directory: %w", err)
	}
	owner, mode := 0, os.FileMode(0o777)
	if j.spec.BoxID >= 0 {
		owner, mode = isolate.FirstUID+j.spec.BoxID, 0o755
	}
	if err := os.Chmod(dir, mode); err != nil {
		return dir, err
	}
	if err := os.Chown(dir, owner, owner); err != nil {
		return dir, err
	}
	if err := copySource(j.source, filepath.Join(dir, j.lang.Source), owner); err != nil {
		return dir, fmt.Errorf("copy the source into the box: %w", err)
	}
	return dir, nil
}

// openToAll makes everything under dir readable (and, where its owner may
// run it, runnable) by every uid; it follows no symlink.
func openToAll(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode().Perm() | 0o444
		if fi.IsDir() || mode&0o100 != 0 {
			mode |= 0o111
		}
		if p == dir {
			return nil // stays 0777
		}
		return os.Chmod(p, mode)
	})
}

func copySource(src, dst string, owner int) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chown(owner, owner); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// compileSpec is the compile phase: the run's box and image, the
// language's compile limits, no input, output captured.
func (j *execJob) compileSpec() (*isolate.Spec, error) {
	r := j.spec
	s := isolate.Defaults()
	s.BoxID, s.BoxDir = r.BoxID, r.BoxDir
	s.Image, s.ImageDir, s.ImageFile, s.ImageMount = r.Image, r.ImageDir, r.ImageFile, r.ImageMount
	s.Seccomp, s.HostNet = r.Seccomp, false
	s.OutputLimit = 256 << 10
	s.StderrToStdout = false
	if err := applyLimits(&s, j.lang.CompileLimits, func(string) bool { return false }); err != nil {
		return nil, fmt.Errorf("language %s: compile limits: %v", j.lang.Name, err)
	}
	vars := phaseVars(&s)
	s.Command = vars.Expand(j.lang.Compile)
	s.Env = vars.Expand(isolate.MergeEnv(isolate.BaseEnv, j.lang.Env))
	return &s, nil
}

// applyLimits sets the limits a language asks for, except those the user
// set on the command line.
func applyLimits(s *isolate.Spec, l langs.Limits, userSet func(string) bool) error {
	var err error
	durations := []struct {
		flag, v string
		dst     *time.Duration
	}{{"time", l.Time, &s.CPUTime}, {"wall-time", l.Wall, &s.WallTime}}
	for _, d := range durations {
		if d.v != "" && !userSet(d.flag) {
			if *d.dst, err = api.ParseDuration(d.v); err != nil {
				return fmt.Errorf("--%s %q: %v", d.flag, d.v, err)
			}
		}
	}
	sizes := []struct {
		flag, v string
		dst     *int64
	}{{"mem", l.Memory, &s.Memory}, {"tmp-size", l.TmpSize, &s.TmpSize}, {"fsize", l.FSize, &s.FileSize}}
	for _, sz := range sizes {
		if sz.v != "" && !userSet(sz.flag) {
			v, err := api.ParseSize(sz.v)
			if err != nil {
				return fmt.Errorf("--%s %q: %v", sz.flag, sz.v, err)
			}
			*sz.dst = max(v, 0) // Unlimited: the runtime's 0, no limit
		}
	}
	if l.Pids > 0 && !userSet("pids") {
		s.Pids = l.Pids
	}
	return nil
}

// phaseVars are the values of a definition's placeholders under s's limits.
func phaseVars(s *isolate.Spec) langs.Vars {
	v := langs.Vars{MemMB: s.Memory >> 20, Pids: s.Pids, CPUs: isolate.NumCPU()}
	if v.MemMB == 0 {
		var si unix.Sysinfo_t
		if unix.Sysinfo(&si) == nil {
			v.MemMB = int64(si.Totalram) * int64(si.Unit) >> 20
		}
	}
	if s.CPUs > 0 && int(math.Ceil(s.CPUs)) < v.CPUs {
		v.CPUs = int(math.Ceil(s.CPUs))
	}
	return v
}

// compileMessage is the compiler's own words, for the CE report.
func compileMessage(r *isolate.Report) string {
	msg := strings.TrimSpace(r.Stderr + r.Stdout)
	switch {
	case r.Status == isolate.StatusTO:
		msg = strings.TrimSpace("compilation: " + r.Message + "\n" + msg)
	case r.Status == isolate.StatusML:
		msg = strings.TrimSpace("compilation: memory limit exceeded\n" + msg)
	case msg == "":
		msg = "compilation failed: " + r.Message
	}
	return msg
}

// sandboxFailure is a report for a failure before any box ran.
func sandboxFailure(s *isolate.Spec, err error) *isolate.Report {
	return &isolate.Report{Status: isolate.StatusXX, Message: err.Error(), BoxID: s.BoxID,
		BlockedSyscalls: []seccomp.Blocked{}, Sandbox: isolate.SandboxInfo{Image: s.Image}}
}

// sweepExecDirs removes the box directories of execs that died.
func sweepExecDirs() {
	ents, err := os.ReadDir(execDirs)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, _, ok := strings.Cut(e.Name(), ".")
		if !ok {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); errors.Is(err, os.ErrNotExist) {
			os.RemoveAll(filepath.Join(execDirs, e.Name()))
		}
	}
}

// emitExecReport prints the outcome as the flags ask: JSON, a report file,
// a meta file of the last phase, or the program's output and a summary.
func emitExecReport(c *cli.Context, rep *execReport) error {
	last := rep.Last()
	if f := runValues.report; f != "" {
		if err := writeJSON(f, rep); err != nil {
			return err
		}
	}
	if f := runValues.meta; f != "" && last != nil {
		if err := writeMeta(f, last); err != nil {
			return err
		}
	}
	if runValues.json {
		return json.NewEncoder(os.Stdout).Encode(rep)
	}
	if rep.Status == isolate.StatusCE {
		fmt.Fprintln(os.Stderr, last.Message)
		fmt.Fprintln(os.Stderr, "isolate: CE (compilation failed)")
		return nil
	}
	if last == nil {
		return nil
	}
	if !runValues.stream {
		os.Stdout.WriteString(last.Stdout)
		os.Stderr.WriteString(last.Stderr)
	}
	fmt.Fprintln(os.Stderr, summary(last))
	return nil
}

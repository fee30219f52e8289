package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/langs"
	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/seccomp"
)

func init() { extraCommands = append(extraCommands, execCommand()) }

// execReport is exec's JSON report (CONTRACT.md): the outcome, and the
// report of each phase that ran (null when it did not).
type execReport struct {
	Status  isolate.Status  `json:"status"`
	Compile *isolate.Report `json:"compile"`
	Run     *isolate.Report `json:"run"`
}

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
	lang   *langs.Lang
	spec   *isolate.Spec // the run phase; the compile phase derives from it
	source string
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
	if err == nil {
		err = checkOutputs(runValues.report, runValues.meta)
	}
	if err != nil {
		return usageErr(err)
	}
	rep, err := job.execute()
	if err != nil {
		return usageErr(err)
	}
	if err := emitExecReport(c, rep); err != nil {
		return &exitError{code: exitSandbox, msg: err.Error()}
	}
	switch rep.Status {
	case isolate.StatusOK:
		return &exitError{code: exitOK}
	case isolate.StatusXX:
		return &exitError{code: exitSandbox}
	}
	return &exitError{code: exitFailed}
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
	spec, err := specFromFlags(c)
	if err != nil {
		return nil, err
	}
	lang, _ := langFromFlags(c) // specFromFlags checked it
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
	return &execJob{lang: lang, spec: spec, source: source}, nil
}

// execute runs the phases in one box directory, and always removes it.
func (j *execJob) execute() (*execReport, error) {
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
	box, err := j.makeBox()
	if err != nil {
		return &execReport{Status: isolate.StatusXX, Run: sandboxFailure(j.spec, err)}, nil
	}
	defer box.Close()
	j.spec.BoxMount = box
	rep := &execReport{}
	if j.lang.Compiled() {
		cspec, err := j.compileSpec()
		if err != nil {
			return nil, err
		}
		crep, err := isolate.Run(cspec, hostOptions())
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
				if err := isolate.OpenToAll(j.spec.BoxMount.File()); err != nil {
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
	rrep, err := isolate.Run(j.spec, hostOptions())
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

// makeBox creates the /box of both phases, a tmpfs of --tmp-size held by
// this process alone (on no host path, so nothing is left behind however
// exec dies), and puts the source in it under the language's file name.
// The box user owns it when the box id is known; otherwise each phase may
// get another id (another uid), so it is open to all of them.
func (j *execJob) makeBox() (*rootfs.Mounted, error) {
	owner, mode := 0, os.FileMode(0o777)
	if j.spec.BoxID >= 0 {
		owner, mode = isolate.FirstUID+j.spec.BoxID, 0o755
	}
	box, err := rootfs.MountTmpfs(j.spec.TmpSize, owner, owner, mode)
	if err != nil {
		return nil, fmt.Errorf("create the box: %w", err)
	}
	if err := copySource(j.source, box.File(), j.lang.Source, owner); err != nil {
		box.Close()
		return nil, fmt.Errorf("copy the source into the box: %w", err)
	}
	return box, nil
}

// copySource copies the caller's file src (opened with the caller's
// rights: root's, as isolate runs) to name in directory dir.
func copySource(src string, dir *os.File, name string, owner int) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(fd), name)
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
	s.BoxID, s.BoxMount = r.BoxID, r.BoxMount
	s.Image, s.ImageDir, s.ImageFile, s.ImageMount = r.Image, r.ImageDir, r.ImageFile, r.ImageMount
	s.Seccomp, s.HostNet = r.Seccomp, false
	s.OutputLimit = 256 << 10
	s.StderrToStdout = false
	if err := applyLimits(&s, j.lang.CompileLimits, func(string) bool { return false }); err != nil {
		return nil, fmt.Errorf("language %s: compile limits: %v", j.lang.Name, err)
	}
	vars := phaseVars(&s)
	s.Command = vars.Expand(j.lang.Compile)
	s.Env = vars.Expand(langEnv(j.lang))
	return &s, nil
}

// applyLimits sets the limits a language asks for, except those the user
// set on the command line.
func applyLimits(s *isolate.Spec, l langs.Limits, userSet func(string) bool) error {
	var err error
	if l.Time != "" && !userSet("time") {
		if s.CPUTime, err = parseDuration("time", l.Time); err != nil {
			return err
		}
	}
	if l.Wall != "" && !userSet("wall-time") {
		if s.WallTime, err = parseDuration("wall-time", l.Wall); err != nil {
			return err
		}
	}
	sizes := []struct {
		flag, v string
		dst     *int64
	}{{"mem", l.Memory, &s.Memory}, {"tmp-size", l.TmpSize, &s.TmpSize}, {"fsize", l.FSize, &s.FileSize}}
	for _, sz := range sizes {
		if sz.v != "" && !userSet(sz.flag) {
			if *sz.dst, err = parseSize(sz.flag, sz.v); err != nil {
				return err
			}
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

// emitExecReport prints the outcome as the flags ask: JSON, a report file,
// a meta file of the last phase, or the program's output and a summary.
func emitExecReport(c *cli.Context, rep *execReport) error {
	last := rep.Run
	if last == nil {
		last = rep.Compile
	}
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

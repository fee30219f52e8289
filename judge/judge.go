// Package judge compiles and runs one source file in a language's image:
// the compile phase, the run phase, and the verdict (CE rules) decided
// here once. Front ends (isolate exec, the service) build a Job from an
// api.Spec and print or send its api.ExecReport.
package judge

import (
	"context"
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

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/langs"
	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/seccomp"
)

// BoxDirs holds the host directories that are the /box of an exec: the
// compiler's output has to outlive the compile box to reach the run box.
// Each is removed when its exec ends; one whose exec died is removed by
// the next exec.
const BoxDirs = "/run/isolate/exec"

// Job is one exec: the language, the run's spec, the source.
type Job struct {
	host   *isolate.Host
	lang   *langs.Lang
	spec   *isolate.Spec // the run phase; the compile phase derives from it
	source string
	dir    string // host directory bound as /box in both phases
}

// New checks a job: the language's run command with args, the request's
// limits (the language's own where the request leaves one at its
// default), the source file. Nothing is created yet but the hold on the
// image's tree, which Run releases. Bad input is an error for the
// caller's user.
func New(host *isolate.Host, req *api.Spec, source string, args []string) (*Job, error) {
	if req.Lang == "" {
		return nil, errors.New("exec: --lang is required (isolate langs lists the languages)")
	}
	fi, err := os.Stat(source)
	if err != nil {
		return nil, fmt.Errorf("exec: source %s: %v", source, errors.Unwrap(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("exec: source %s is not a regular file", source)
	}
	lang, err := langs.Find(req.Lang)
	if err != nil {
		return nil, &api.FieldError{Field: "lang", Msg: err.Error()}
	}
	r := *req
	r.Args = []string{lang.Name} // the language's run command, below
	spec, err := host.Resolve(&r)
	if err != nil {
		return nil, err
	}
	if err := applyLimits(spec, lang.RunLimits, req); err != nil {
		spec.ImageTree.Close()
		return nil, fmt.Errorf("language %s: run limits: %v", lang.Name, err)
	}
	vars := phaseVars(spec)
	spec.Command = append(vars.Expand(lang.Run), args...)
	spec.Env = vars.Expand(spec.Env)
	return &Job{host: host, lang: lang, spec: spec, source: source}, nil
}

// Run compiles (if the language compiles) and runs the source, in one box
// directory that it always removes, and decides the verdict: CE when the
// compiler failed, or the language's syntax check did; else the run's.
// stdio is the run phase's; the compiler gets no input and its output is
// captured.
func (j *Job) Run(ctx context.Context, stdio isolate.IO) (*api.ExecReport, error) {
	defer j.spec.ImageTree.Close()
	sweepExecDirs()
	if j.spec.ImageFile != "" {
		// One mount for both phases: the run finds in the page cache
		// what the compiler already read.
		m, err := rootfs.MountSquashfs(j.spec.ImageFile)
		if err != nil {
			return &api.ExecReport{Status: isolate.StatusXX, Run: sandboxFailure(j.spec, err)}, nil
		}
		defer m.Close()
		j.spec.ImageMount = m
	}
	dir, err := j.makeDir()
	if dir != "" {
		defer os.RemoveAll(dir)
	}
	if err != nil {
		return &api.ExecReport{Status: isolate.StatusXX, Run: sandboxFailure(j.spec, err)}, nil
	}
	j.dir = dir
	j.spec.BoxDir = dir
	rep := &api.ExecReport{}
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
		switch compileVerdict(crep) {
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
		case isolate.StatusCE:
			rep.Status = isolate.StatusCE
			crep.Message = compileMessage(crep)
			return rep, nil
		}
	}
	rrep, err := j.run(ctx, j.spec, stdio)
	if err != nil {
		return nil, err
	}
	if syntaxError(j.lang, rrep) {
		// The language checks its source in the run's own process: it
		// did not compile, and nothing of it ran.
		rrep.Status = isolate.StatusCE
		rrep.Message = compileMessage(rrep)
		return &api.ExecReport{Status: isolate.StatusCE, Compile: rrep}, nil
	}
	rep.Run = rrep
	rep.Status = rrep.Status
	return rep, nil
}

// run runs one phase.
func (j *Job) run(ctx context.Context, spec *isolate.Spec, stdio isolate.IO) (*isolate.Report, error) {
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
func (j *Job) makeDir() (string, error) {
	if err := os.MkdirAll(BoxDirs, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", BoxDirs, err)
	}
	dir, err := os.MkdirTemp(BoxDirs, strconv.Itoa(os.Getpid())+".")
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
func (j *Job) compileSpec() (*isolate.Spec, error) {
	r := j.spec
	s := isolate.Defaults()
	s.BoxID, s.BoxDir = r.BoxID, r.BoxDir
	s.Image, s.ImageDir, s.ImageFile, s.ImageMount, s.ImageTree = r.Image, r.ImageDir, r.ImageFile, r.ImageMount, r.ImageTree
	s.Seccomp, s.HostNet = r.Seccomp, false
	s.OutputLimit = 256 << 10
	s.StderrToStdout = false
	if err := applyLimits(&s, j.lang.CompileLimits, &api.Spec{}); err != nil {
		return nil, fmt.Errorf("language %s: compile limits: %v", j.lang.Name, err)
	}
	vars := phaseVars(&s)
	s.Command = vars.Expand(j.lang.Compile)
	s.Env = vars.Expand(isolate.MergeEnv(isolate.BaseEnv, j.lang.Env))
	return &s, nil
}

// applyLimits sets the limits a language asks for, except those the
// request sets itself (non-zero).
func applyLimits(s *isolate.Spec, l langs.Limits, req *api.Spec) error {
	var err error
	durations := []struct {
		flag, v string
		set     bool
		dst     *time.Duration
	}{{"time", l.Time, req.CPUTimeMs != 0, &s.CPUTime}, {"wall-time", l.Wall, req.WallTimeMs != 0, &s.WallTime}}
	for _, d := range durations {
		if d.v != "" && !d.set {
			if *d.dst, err = api.ParseDuration(d.v); err != nil {
				return fmt.Errorf("--%s %q: %v", d.flag, d.v, err)
			}
		}
	}
	sizes := []struct {
		flag, v string
		set     bool
		dst     *int64
	}{
		{"mem", l.Memory, req.MemoryBytes != 0, &s.Memory}, {"tmp-size", l.TmpSize, req.TmpSizeBytes != 0, &s.TmpSize},
		{"fsize", l.FSize, req.FileSizeBytes != 0, &s.FileSize},
	}
	for _, sz := range sizes {
		if sz.v != "" && !sz.set {
			v, err := api.ParseSize(sz.v)
			if err != nil {
				return fmt.Errorf("--%s %q: %v", sz.flag, sz.v, err)
			}
			*sz.dst = max(v, 0) // Unlimited: the runtime's 0, no limit
		}
	}
	if l.Pids > 0 && req.Pids == 0 {
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

// compileVerdict is what the compile phase's report means for the exec:
// OK (go on to the run), XX (the sandbox failed) or CE.
func compileVerdict(r *api.Report) api.Status {
	switch r.Status {
	case api.StatusOK, api.StatusXX:
		return r.Status
	}
	return api.StatusCE
}

// syntaxError tells whether the run of a language that checks its source
// in the run's own process (no compile phase) ended with the language's
// syntax-error exit status: CE, and nothing of the program ran.
func syntaxError(l *langs.Lang, r *api.Report) bool {
	return !l.Compiled() && l.SyntaxErrorExit != 0 && r.Status == api.StatusRE && r.ExitCode == l.SyntaxErrorExit
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
	ents, err := os.ReadDir(BoxDirs)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, _, ok := strings.Cut(e.Name(), ".")
		if !ok {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); errors.Is(err, os.ErrNotExist) {
			os.RemoveAll(filepath.Join(BoxDirs, e.Name()))
		}
	}
}

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
	"math"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
	"github.com/isolate-sandbox/isolate/langs"
	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/seccomp"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// Job is one exec: the language, the run's spec, the source.
type Job struct {
	host   *isolate.Host
	lang   *langs.Lang
	spec   *isolate.Spec // the run phase; the compile phase derives from it
	source string
	caps   *caller.Caps // the service's, for the compile phase; nil: none
}

// CapCompile bounds the compile phase's limits (the language's own) by a
// service's caps, as the run's are: a caller the caps bound compiles
// within them too.
func (j *Job) CapCompile(c caller.Caps) { j.caps = &c }

// SetCaller makes caller whose rights the source and the run's other host
// paths are opened with; nil: this process's.
func (j *Job) SetCaller(caller *hostfs.Cred) { j.spec.Caller = caller }

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
	box, err := j.makeBox()
	if err != nil {
		return &api.ExecReport{Status: isolate.StatusXX, Run: sandboxFailure(j.spec, err)}, nil
	}
	defer box.Close()
	j.spec.BoxMount = box
	rep := &api.ExecReport{}
	if j.lang.Compiled() {
		cspec, err := j.compileSpec()
		if err != nil {
			return nil, err
		}
		crep, err := j.run(ctx, cspec, isolate.IO{BeforeStart: stdio.BeforeStart})
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
				if err := isolate.OpenToAll(j.spec.BoxMount.File()); err != nil {
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

// makeBox creates the /box of both phases, a tmpfs of --tmp-size held by
// this process alone (on no host path, so nothing is left behind however
// exec dies), and puts the source in it under the language's file name.
// The box user owns it when the box id is known; otherwise each phase may
// get another id (another uid), so it is open to all of them.
func (j *Job) makeBox() (*rootfs.Mounted, error) {
	// Root's box users have their uid as gid; a user who is not root
	// has a primary group of its own, most often another number.
	uid, gid, mode := 0, 0, os.FileMode(0o777)
	if j.spec.BoxID >= 0 {
		uid, gid, mode = isolate.FirstUID+j.spec.BoxID, isolate.FirstUID+j.spec.BoxID, 0o755
	}
	newBox := rootfs.MountTmpfs
	if j.host.Rootless() {
		// A directory of the caller's: the box user is the caller, or a
		// subordinate id each phase's init hands it to and takes it back
		// from.
		uid, gid, newBox = os.Getuid(), os.Getgid(), j.host.RootlessBoxDir
	}
	box, err := newBox(j.spec.TmpSize, uid, gid, mode)
	if err != nil {
		return nil, fmt.Errorf("create the box: %w", err)
	}
	if err := copySource(j.spec.Caller, j.source, box.File(), j.lang.Source, uid, gid); err != nil {
		box.Close()
		return nil, fmt.Errorf("copy the source into the box: %w", err)
	}
	return box, nil
}

// copySource copies the caller's file src (opened with the caller's
// rights) to name in directory dir, owned by uid:gid.
func copySource(caller *hostfs.Cred, src string, dir *os.File, name string, uid, gid int) error {
	var in *os.File
	err := hostfs.AsCaller(caller, func() (err error) {
		in, err = os.Open(src)
		return err
	})
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
	if err := out.Chown(uid, gid); err != nil {
		out.Close()
		return err
	}
	// Readable by the box user whatever the umask: nothing here may set
	// the process's own, which the service shares.
	if err := out.Chmod(0o644); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// CompileOutputLimit is what the compile phase keeps of each of its
// streams (the compiler's diagnostics).
const CompileOutputLimit = 256 << 10

// compileSpec is the compile phase: the run's box and image, the
// language's compile limits, no input, output captured.
func (j *Job) compileSpec() (*isolate.Spec, error) {
	r := j.spec
	s := isolate.Defaults()
	s.BoxID, s.BoxMount = r.BoxID, r.BoxMount
	s.Image, s.ImageDir, s.ImageFile, s.ImageMount, s.ImageTree = r.Image, r.ImageDir, r.ImageFile, r.ImageMount, r.ImageTree
	s.Seccomp, s.HostNet = r.Seccomp, false
	s.MemoryRlimit, s.MemoryRlimitFactor = r.MemoryRlimit, r.MemoryRlimitFactor
	s.OutputLimit = CompileOutputLimit
	s.StderrToStdout = false
	if err := applyLimits(&s, j.lang.CompileLimits, &api.Spec{}); err != nil {
		return nil, fmt.Errorf("language %s: compile limits: %v", j.lang.Name, err)
	}
	if c := j.caps; c != nil {
		ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
		for _, l := range []struct {
			v   *int64
			max int64
		}{{&s.Memory, c.MemoryBytes}, {&s.Pids, c.Pids}, {&s.TmpSize, c.TmpSizeBytes}, {&s.FileSize, c.FileSizeBytes}} {
			if l.max > 0 && (*l.v <= 0 || *l.v > l.max) {
				*l.v = l.max
			}
		}
		for _, l := range []struct {
			v   *time.Duration
			max int64
		}{{&s.CPUTime, c.CPUTimeMs}, {&s.WallTime, c.WallTimeMs}} {
			if l.max > 0 && (*l.v <= 0 || *l.v > ms(l.max)) {
				*l.v = ms(l.max)
			}
		}
		if c.CPUTimeMs > 0 {
			s.ExtraTime = min(s.ExtraTime, max(ms(c.CPUTimeMs)-s.CPUTime, 0))
		}
		if c.CPUs > 0 && (s.CPUs <= 0 || s.CPUs > c.CPUs) {
			s.CPUs = c.CPUs
		}
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
	v := langs.Vars{MemMB: s.Memory >> 20, Pids: s.Pids, CPUs: boxinit.NumCPU()}
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

package ioi

// Package ioi is the ioi/isolate-compatible form: `isolate [options]
// --init | --run -- CMD... | --cleanup`, with ioi/isolate 2.x's options,
// box layout, meta file and exit statuses (see MIGRATING.md). The
// isolation is ours: user namespace, seccomp, cgroups on v1, hybrid and
// v2 hosts alike. The CLI parses with Parse, calls Init, Cleanup, CgroupRoot
// or Run on the Host of its front end (the CLI's one, or the service's),
// and prints.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"strings"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
)

// CgroupRoot is the directory under which host's box cgroups are made
// (--print-cg-root).
func CgroupRoot(host *isolate.Host) (string, error) {
	m, err := host.Cgroups()
	if err != nil {
		return "", err
	}
	parents := m.Parents()
	if dir, ok := parents[""]; ok {
		return dir, nil
	}
	return parents["memory"], nil
}

// Run is one `--run`: hold the box, hand box/ to the box user, run, hand
// it back; write the meta file (unless it is "-": the caller prints
// MetaText then). A meta file that cannot be written is an error. Ending
// ctx interrupts the run (a signal to isolate: its cause has a Signal
// method, and the meta file says which).
func Run(ctx context.Context, o *Options, host *isolate.Host, caller *Caller) (*isolate.Report, error) {
	cfg := host.Config
	var meta *os.File
	if o.meta != "" && o.meta != "-" {
		// Opened before the run, as ioi/isolate does, with the caller's
		// rights, no symlink followed anywhere in the path, and written
		// through this descriptor: nothing the program does can redirect
		// it.
		f, err := hostfs.CreateReportFile(caller.Cred, caller.path(o.meta))
		if err != nil {
			return nil, fmt.Errorf("failed to open metafile '%s': %v", o.meta, strerror(err))
		}
		defer f.Close()
		meta = f
	}
	owner := o.owner()
	stdio := ioiStdio{caller: caller}
	defer stdio.close()
	rep := func() *isolate.Report {
		pb, err := isolate.OpenBox(cfg.BoxRoot, o.boxID, o.wait)
		if errors.Is(err, isolate.ErrNotInitialized) {
			return xxReport("Box not found, did you run `isolate --init'?")
		} else if err != nil {
			return xxReport(err.Error())
		}
		defer pb.Close()
		if err := pb.Enter(o.specialFiles); err != nil {
			return xxReport(err.Error())
		}
		rep := ioiExecute(ctx, o, host, pb, &stdio, caller)
		if err := pb.Leave(owner, o.specialFiles); err != nil && rep.Status != isolate.StatusXX {
			rep.Status, rep.Message = isolate.StatusXX, err.Error()
		}
		return rep
	}()
	ioiAdjust(rep, o.timeout)
	stdio.afterRun()
	if f := rep.StartFailure; f != nil && f.Step == "execve" && rep.Status == isolate.StatusRE && stdio.errOut != nil {
		// ioi/isolate's child says why it could not execute the program
		// on the program's standard error.
		fmt.Fprintf(stdio.errOut, "execve(%q): %s\n", o.command[0], f.Msg)
	}
	if meta != nil {
		if _, err := meta.WriteString(MetaText(rep)); err != nil {
			return rep, fmt.Errorf("write meta file: %w", err)
		}
	}
	return rep, nil
}

// Init creates the box (--init) in host's box root and returns its
// directory.
func Init(o *Options, host *isolate.Host) (string, error) {
	return isolate.InitBox(host.Config, o.boxID, o.owner(), o.wait)
}

// Cleanup removes the box (--cleanup), and its cgroups if a killed
// isolate left them.
func Cleanup(o *Options, host *isolate.Host) error {
	return isolate.CleanupBox(host.Config, o.boxID, o.wait)
}

// owner is who gets box/ back: the caller, or --as-uid/--as-gid.
func (o *Options) owner() isolate.Owner {
	if o.asUID >= 0 {
		return isolate.Owner{UID: o.asUID, GID: o.asGID}
	}
	return isolate.Caller()
}

// xxReport is the report of a run the sandbox could not do.
func xxReport(msg string) *isolate.Report {
	return &isolate.Report{Status: isolate.StatusXX, Message: msg, BoxID: -1}
}

// ioiExecute builds the run's spec from the options and runs it.
func ioiExecute(ctx context.Context, o *Options, host *isolate.Host, pb *isolate.PersistentBox, stdio *ioiStdio, caller *Caller) *isolate.Report {
	spec, mounts, err := ioiSpec(o, pb, caller)
	if err != nil {
		return xxReport(err.Error())
	}
	if o.verbose > 0 {
		// Before the streams are set up: an inherited stderr may be
		// truncated when the program gets its own open of it.
		fmt.Fprintf(caller.Stderr, "Box %d in %s: %q in %s, binds %+v\n", o.boxID, pb.Dir, spec.Command, spec.Chdir, spec.Binds)
	}
	// ioi/isolate opens the streams inside the box, after its clock has
	// started: waiting for a FIFO's other end is part of the wall time,
	// and the wall limit ends it.
	start := time.Now()
	openCtx, cancel := context.WithCancel(ctx)
	if o.wall > 0 {
		openCtx, cancel = context.WithTimeout(ctx, o.wall)
	}
	io, err := stdio.setup(openCtx, o, spec, mounts, pb.HostUID())
	io.BeforeStart = caller.BeforeStart
	cancel()
	waited := time.Since(start)
	switch {
	case ctx.Err() != nil:
		cause := fmt.Errorf("interrupted: %w", context.Cause(ctx))
		return &isolate.Report{Status: isolate.StatusXX, Message: cause.Error(), Cause: cause, WallTime: waited.Seconds(), BoxID: o.boxID}
	case errors.Is(err, context.DeadlineExceeded):
		return &isolate.Report{Status: isolate.StatusTO, Killed: true, Limit: isolate.LimitWall, WallTime: waited.Seconds(), BoxID: o.boxID}
	case err != nil:
		return xxReport(err.Error())
	}
	if o.wall > 0 {
		spec.WallTime = max(o.wall-waited, time.Millisecond)
	}
	prep, err := host.PrepareSpec(spec)
	if err != nil {
		return xxReport(ioiWords(err).Error())
	}
	rep, err := prep.Run(ctx, io)
	if err != nil {
		return xxReport(err.Error())
	}
	rep.WallTime += waited.Seconds()
	return rep
}

// ioiSpec turns ioi/isolate's options into a run of our runtime.
func ioiSpec(o *Options, pb *isolate.PersistentBox, caller *Caller) (*isolate.Spec, []mountPoint, error) {
	s := isolate.Defaults()
	s.BoxID = o.boxID
	s.CPUTime = o.timeout
	// ioi/isolate kills once the CPU time exceeds both -t and -x
	// (check_timeout: ms > timeout && ms > extra_timeout; its manual: "wait
	// until --extra-time seconds elapse since the start of the program"),
	// not after -t plus -x as our native --extra-time does.
	if o.extra > o.timeout {
		s.ExtraTime = o.extra - o.timeout
	}
	s.WallTime = o.wall
	if s.WallTime == 0 {
		// ioi/isolate has no wall-clock limit unless -w sets one.
		s.WallTime = time.Duration(math.MaxInt64)
	}
	s.Memory = o.cgMemKB * 1024 // 0: none, as without --cg-mem
	s.AddrSpace = o.memKB * 1024
	s.Pids = o.processes
	s.FileSize = o.fsizeKB * 1024
	s.OpenFiles = o.openFiles
	s.Stack = o.stackKB * 1024
	if s.Stack == 0 {
		// ioi/isolate's default stack is unlimited (RLIM_INFINITY, which
		// also makes glibc give threads its default stack size), up to
		// the hard limit isolate itself got: set in the program, not in
		// this process, which may be the service's.
		s.Stack = isolate.StackAsHard
	}
	s.HostNet = o.shareNet
	// The meta file names no blocked system call: none is recorded.
	s.NoSyscallReport = true
	s.Env = ioiEnv(o, caller.Env)
	s.Chdir = "/box"
	if o.chdir != "" {
		s.Chdir = path.Join("/box", o.chdir)
		if path.IsAbs(o.chdir) {
			s.Chdir = path.Clean(o.chdir)
		}
	}
	s.Command = append([]string(nil), o.command...)
	s.Command[0] = execPath(s.Command[0])
	mounts, err := o.dirs.apply(&s, pb, o.noDirs)
	if err != nil {
		return nil, nil, err
	}
	return &s, mounts, nil
}

// execPath is how the runtime finds the program ioi/isolate executes:
// execve(2) of the command's name as a path, relative to the working
// directory, never searched in PATH.
func execPath(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	return "./" + name
}

// ioiEnv is the program's environment under ioi/isolate's rules: nothing
// (or, with -e, the caller's whole environment), LIBC_FATAL_STDERR_=1,
// then each -E in order: VAR passes the caller's value on, VAR=value sets
// it, VAR= removes it.
func ioiEnv(o *Options, callerEnv []string) []string {
	var env []string
	if o.fullEnv {
		env = append(env, callerEnv...)
	}
	for _, rule := range append([]string{"LIBC_FATAL_STDERR_=1"}, o.env...) {
		name, val, set := strings.Cut(rule, "=")
		kept := env[:0]
		for _, kv := range env {
			if !strings.HasPrefix(kv, name+"=") {
				kept = append(kept, kv)
			}
		}
		env = kept
		switch {
		case set && val != "":
			env = append(env, rule)
		case !set:
			if v, ok := lookupEnv(callerEnv, name); ok {
				env = append(env, name+"="+v)
			}
		}
	}
	if env == nil {
		env = []string{}
	}
	return env
}

// lookupEnv is os.LookupEnv in env: the first NAME=.
func lookupEnv(env []string, name string) (string, bool) {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// Caller is the world of whoever gave the command line: the environment
// (-e, -E NAME), how a host path it names resolves (a relative -M: from
// its directory) and the standard streams the program inherits when -i,
// -o or -r does not name a file (a nil one: none, as a closed
// descriptor).
type Caller struct {
	Env                   []string
	Path                  func(string) string // nil: as given
	Stdin, Stdout, Stderr *os.File
	Cred                  *hostfs.Cred // whose rights open the meta file; nil: this process's
	BeforeStart           func()       // the run's isolate.IO.BeforeStart
}

// path resolves a host path the caller named.
func (c *Caller) path(p string) string {
	if c.Path == nil {
		return p
	}
	return c.Path(p)
}

// ioiWords words a request field's error as the ioi form's option
// (api.Fields): "--dir /x: no such file or directory".
func ioiWords(err error) error {
	return api.OptionError(err, func(f api.Field) string { return f.IOI })
}

package cmdline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
)

// runValues receive the options of `run` (and `exec`) as urfave/cli parses
// them: reading them back by name (c.String) scans every flag's names with
// a regexp on each call, which cost about half a millisecond per run.
// Each invocation has its own.
type runValues struct {
	boxID, image, lang                         string
	limits                                     [len(limitFields)]string // as limitFields
	net, stdin, stdout, stderr, chdir, seccomp string
	report, meta                               string
	cgroupRoot                                 string // without root (rootless.go)
	allowRlimitOnly                            bool
	bind, copyIn, copyOut, env                 cli.StringSlice
	stream, json                               bool
}

// limitFields are the fields of api.Fields that are limits with a
// command-line option, in the table's order: run's limit options are
// made from them.
var limitFields = [...]api.Field{
	field("cpu_time_ms"), field("wall_time_ms"), field("extra_time_ms"), field("memory_bytes"), field("pids"),
	field("cpus"), field("file_size_bytes"), field("tmp_size_bytes"), field("open_files"), field("stack_bytes"),
	field("output_limit_bytes"),
}

// field is api.Fields' entry of a limit with an option.
func field(json string) api.Field {
	for _, f := range api.Fields {
		if f.JSON == json && f.Flag != "" && f.Kind != api.Other {
			return f
		}
	}
	panic("cmdline: no limit option for " + json)
}

// limitFlags are run's limit options, from api.Fields.
func (v *runValues) limitFlags() []cli.Flag {
	flags := make([]cli.Flag, len(limitFields))
	for i, f := range limitFields {
		var aliases []string
		if f.Short != "" {
			aliases = []string{f.Short}
		}
		flags[i] = &cli.StringFlag{Name: f.Flag, Aliases: aliases, Value: f.Default, Usage: f.Usage, Destination: &v.limits[i]}
	}
	return flags
}

// runFlags are the options of `run` (and of `exec`).
func (iv *invocation) runFlags() []cli.Flag {
	v := &iv.values
	flags := []cli.Flag{
		&cli.StringFlag{Name: "box-id", Aliases: []string{"b"}, Usage: "box `N` (default: a free one)", Destination: &v.boxID},
		&cli.StringFlag{Name: "image", Value: "host", Usage: "root file system: host, an image name, a directory or a squashfs file", Destination: &v.image},
		&cli.StringFlag{Name: "lang", Usage: "the language `LANG`'s image and environment (isolate langs)", Destination: &v.lang},
	}
	return cachedNames(append(append(flags, v.limitFlags()...),
		&cli.StringSliceFlag{Name: "bind", Usage: "`HOST:BOX[:ro|rw]` bind (repeatable)", Destination: &v.bind},
		&cli.StringSliceFlag{Name: "copy-in", Usage: "`HOST:BOX` copy into the box", Destination: &v.copyIn},
		&cli.StringSliceFlag{Name: "copy-out", Usage: "`BOX:HOST` copy out of the box", Destination: &v.copyOut},
		&cli.StringSliceFlag{Name: "env", Aliases: []string{"E"}, Usage: "`NAME[=VALUE]` environment variable", Destination: &v.env},
		&cli.StringFlag{Name: "net", Value: "none", Usage: "none, host, or allow:LIST: names, *.names, addresses and CIDRs with optional :PORT the box may reach through a proxy (!ENTRY denies)", Destination: &v.net},
		&cli.StringFlag{Name: "stdin", Aliases: []string{"i"}, Usage: "host `FILE` as standard input", Destination: &v.stdin},
		&cli.StringFlag{Name: "stdout", Aliases: []string{"o"}, Usage: "host `FILE` for standard output", Destination: &v.stdout},
		&cli.StringFlag{Name: "stderr", Aliases: []string{"r"}, Usage: "host `FILE` for standard error", Destination: &v.stderr},
		&cli.BoolFlag{Name: "stream", Usage: "also copy output live to isolate's stdout/stderr", Destination: &v.stream},
		&cli.StringFlag{Name: "chdir", Aliases: []string{"c"}, Value: "/box", Usage: "working `DIR` inside", Destination: &v.chdir},
		&cli.StringFlag{Name: "seccomp", Value: "default", Usage: "default, none, or an OCI seccomp profile `FILE`", Destination: &v.seccomp},
		&cli.BoolFlag{Name: "json", Usage: "print the report as JSON on stdout", Destination: &v.json},
		&cli.StringFlag{Name: "report", Usage: "write the JSON report to `FILE`", Destination: &v.report},
		&cli.StringFlag{Name: "meta", Aliases: []string{"M"}, Usage: "write an ioi/isolate-style meta `FILE`", Destination: &v.meta},
		&cli.StringFlag{Name: "cgroup-root", Usage: "without root: the delegated cgroup v2 `DIR` to put boxes under", Destination: &v.cgroupRoot},
		&cli.BoolFlag{Name: "allow-rlimit-only", Usage: "without root and a delegated cgroup: enforce the limits with rlimits alone", Destination: &v.allowRlimitOnly},
	))
}

func (iv *invocation) runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "one sandboxed run, then everything is torn down",
		ArgsUsage: "-- COMMAND [ARG...]",
		Flags:     iv.runFlags(),
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageErr(err)
		},
		Action: func(c *cli.Context) error {
			if err := iv.checkRunner(); err != nil {
				return err
			}
			spec, err := iv.specFromFlags(c)
			if err != nil {
				return usageErr(err)
			}
			spec.Args = c.Args().Slice()
			return iv.runAndReport(spec)
		},
	}
}

// specFromFlags turns the run options into a request.
func (iv *invocation) specFromFlags(c *cli.Context) (*api.Spec, error) {
	v := &iv.values
	s := &api.Spec{Lang: v.lang, Cwd: v.chdir, Seccomp: iv.profilePath(v.seccomp), Net: v.net}
	if list, ok := strings.CutPrefix(v.net, "allow:"); ok {
		s.Net, s.Network = "allow", ParseNetworkList(list)
	}
	if c.IsSet("box-id") {
		id, err := ParseBoxID(v.boxID)
		if err != nil {
			return nil, fmt.Errorf("--box-id %q: %v", v.boxID, err)
		}
		s.BoxID = &id
	}
	if c.IsSet("image") || v.lang == "" {
		s.Image = iv.imagePath(v.image)
	}
	// A limit left at its default stays 0 in the request, the contract's
	// same default, so that exec can tell it from a value the user gave
	// (a language's own limits apply to the rest). An empty value given
	// is an error, not the default.
	for i, f := range limitFields {
		if !c.IsSet(f.Flag) {
			continue
		}
		if err := f.Set(s, v.limits[i]); err != nil {
			return nil, fmt.Errorf("--%s %q: %v", f.Flag, v.limits[i], err)
		}
	}
	var err error
	for _, b := range v.bind.Value() {
		bind, err := parseBind(b)
		if err != nil {
			return nil, err
		}
		bind.Host = iv.path(bind.Host)
		s.Binds = append(s.Binds, bind)
	}
	for _, c := range v.copyIn.Value() {
		cp, err := parseCopy("copy-in", c)
		if err != nil {
			return nil, err
		}
		cp.From = iv.path(cp.From)
		s.CopyIn = append(s.CopyIn, cp)
	}
	for _, c := range v.copyOut.Value() {
		cp, err := parseCopy("copy-out", c)
		if err != nil {
			return nil, err
		}
		cp.To = iv.path(cp.To)
		s.CopyOut = append(s.CopyOut, cp)
	}
	if s.Env, err = envFromFlags(v.env.Value(), iv.lookupEnv); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil && !isMissingArgs(err) {
		return nil, flagError(err)
	}
	return s, nil
}

// isMissingArgs tells a request without a command apart: the command
// comes after the flags, and the runtime says how to give it.
func isMissingArgs(err error) bool {
	var fe *api.FieldError
	return errors.As(err, &fe) && fe.Field == "args"
}

// flagError words a request field's error as the option's.
func flagError(err error) error {
	var fe *api.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	if strings.HasPrefix(fe.Field, "args") {
		return errors.New("no command given (isolate run [options] -- COMMAND [ARG...])")
	}
	return api.OptionError(err, func(f api.Field) string { return f.Flag })
}

// stdioFromFlags opens the host files --stdin, --stdout and --stderr
// name, with the caller's rights; with --stream, output goes live to the
// caller's own too. close closes what was opened. A FIFO as --stdin waits
// for its writer until ctx ends or the run's wall limit passes.
func (iv *invocation) stdioFromFlags(ctx context.Context, wall time.Duration) (stdio isolate.IO, close func(), err error) {
	var files []*os.File
	close = func() {
		for _, f := range files {
			f.Close()
		}
	}
	v := &iv.values
	if v.stdin != "" {
		if iv.namesOwnStdin(v.stdin) {
			// Passed on as it is: a socket, as Node's child_process
			// gives its children, cannot be opened again. Checked as a
			// path is: never a directory or a kernel interface.
			if err := hostfs.CheckStreamFile(iv.Stdin); err != nil {
				return stdio, close, fmt.Errorf("--stdin %s: %w", v.stdin, err)
			}
			stdio.Stdin = iv.Stdin
		} else {
			f, err := hostfs.OpenStdin(ctx, iv.cred, iv.hostPath(v.stdin), wall)
			if err != nil {
				return stdio, close, err
			}
			files = append(files, f)
			stdio.Stdin = f
		}
	}
	outputs := []struct {
		option, path string
		dst          *interface{ Write([]byte) (int, error) }
		live         *os.File
	}{{"--stdout", iv.hostPath(v.stdout), &stdio.Stdout, iv.Stdout}, {"--stderr", iv.hostPath(v.stderr), &stdio.Stderr, iv.Stderr}}
	for _, o := range outputs {
		if o.path == "" {
			continue
		}
		if err := hostfs.AsCaller(iv.cred, func() error { return hostfs.CheckOutput(o.path) }); err != nil {
			return stdio, close, err
		}
	}
	for _, o := range outputs {
		switch {
		case o.path != "":
			f, err := hostfs.CreateOutput(iv.cred, o.path)
			if err != nil {
				return stdio, close, fmt.Errorf("%s %w", o.option, err) // err names the path
			}
			files = append(files, f)
			*o.dst = f
		case v.stream:
			// Not the file itself, which the program would get: the
			// output is captured and copied live.
			*o.dst = liveCopy{o.live}
		}
	}
	return stdio, close, nil
}

// liveCopy is a Writer that is not an *os.File, so that Run captures the
// stream and copies it here as it arrives.
type liveCopy struct{ w *os.File }

func (l liveCopy) Write(p []byte) (int, error) { return l.w.Write(p) }

// runAndReport runs spec and prints the report the way the flags ask.
func (iv *invocation) runAndReport(spec *api.Spec) error {
	host, err := iv.host()
	if err != nil {
		return usageErr(err)
	}
	if err := iv.checkCallerPaths(spec); err != nil {
		return usageErr(err)
	}
	files, err := iv.openOutputs()
	if err != nil {
		return usageErr(err)
	}
	defer files.close()
	prep, err := host.Prepare(spec)
	if err != nil {
		return usageErr(flagError(err))
	}
	defer prep.Close()
	prep.SetCaller(iv.cred)
	return iv.withRunIO(wallLimit(spec), func(ctx context.Context, stdio isolate.IO) (api.Status, error) {
		rep, err := prep.Run(ctx, stdio)
		if err != nil {
			return "", err
		}
		rep.Sandbox.Via = iv.via()
		iv.settle(rep)
		return rep.Status, iv.emitReport(rep, files)
	})
}

// settle gives rep the service's request id and tells Settled of it.
func (iv *invocation) settle(rep *api.Report) {
	rep.RequestID = iv.RequestID
	if iv.Settled != nil {
		iv.Settled(iv.asked, iv.granted, rep)
	}
}

// withRunIO opens the run's host files and a context that signals end,
// calls run, and turns its outcome into isolate's exit: an error from run
// itself is a usage error (no report), one from printing a sandbox
// failure, else the status's exit.
func (iv *invocation) withRunIO(wall time.Duration, run func(context.Context, isolate.IO) (api.Status, error)) error {
	ctx, stop, ok := iv.signalContext()
	if !ok {
		return &exitError{code: exitSandbox} // a signal ended the invocation: Main says how
	}
	defer stop()
	stdio, closeFiles, err := iv.stdioFromFlags(ctx, wall)
	defer closeFiles()
	if err != nil {
		return usageErr(err)
	}
	if iv.signals == nil {
		stdio.BeforeStart = catchFaults
	}
	if iv.Admit != nil && iv.Caller != nil && iv.Caller.Capped() {
		// A run slot of the service's, as an API request of one command
		// takes (--parallel, --queue).
		release, err := iv.Admit(ctx)
		if err != nil {
			return Failure(err.Error())
		}
		defer release()
	}
	status, err := run(ctx, stdio)
	switch {
	case err != nil && status == "":
		return usageErr(err)
	case err != nil:
		return &exitError{code: exitSandbox, msg: err.Error()}
	}
	return &exitError{code: exitStatus(status)}
}

// via is the report's sandbox.via: which path ran the invocation.
func (iv *invocation) via() string {
	if iv.Via != "" {
		return iv.Via
	}
	return "in-process"
}

// wallLimit is a request's wall-clock limit, its default included.
func wallLimit(spec *api.Spec) time.Duration {
	return time.Duration(spec.WithDefaults().WallTimeMs) * time.Millisecond
}

// exitStatus is isolate's exit status for a finished run or exec (the
// one place it is decided): 0 OK, 2 the sandbox failed, 1 the program
// did.
func exitStatus(s api.Status) int {
	switch s {
	case api.StatusOK:
		return exitOK
	case api.StatusXX:
		return exitSandbox
	}
	return exitFailed
}

// ParseNetworkList reads --net allow:LIST: comma-separated entries, a
// "!" before an entry to deny it.
func ParseNetworkList(list string) *api.Network {
	n := &api.Network{Allow: []string{}}
	for _, e := range strings.Split(list, ",") {
		if d, ok := strings.CutPrefix(e, "!"); ok {
			n.Deny = append(n.Deny, d)
		} else {
			n.Allow = append(n.Allow, e)
		}
	}
	return n
}

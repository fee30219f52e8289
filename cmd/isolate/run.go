package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// runValues receive the options of `run` (and `exec`) as urfave/cli parses
// them: reading them back by name (c.String) scans every flag's names with
// a regexp on each call, which cost about half a millisecond per run. Only
// one command runs per process, so the commands share them.
var runValues struct {
	boxID                                               int
	image, lang, time, wallTime, extraTime, mem, pids   string
	cpus, fsize, tmpSize, openFiles, stack, outputLimit string
	net, stdin, stdout, stderr, chdir, seccomp          string
	report, meta                                        string
	bind, copyIn, copyOut, env                          cli.StringSlice
	stream, json                                        bool
}

// runFlags are the options of `run` (and of `exec`).
func runFlags() []cli.Flag {
	v := &runValues
	return cachedNames([]cli.Flag{
		&cli.IntFlag{Name: "box-id", Aliases: []string{"b"}, Value: -1, Usage: "box `N` (default: a free one)", Destination: &v.boxID},
		&cli.StringFlag{Name: "image", Value: "host", Usage: "root file system: host, an image name, a directory or a squashfs file", Destination: &v.image},
		&cli.StringFlag{Name: "lang", Usage: "the language `LANG`'s image and environment (isolate langs)", Destination: &v.lang},
		&cli.StringFlag{Name: "time", Aliases: []string{"t"}, Usage: "CPU time limit `DUR` of the whole program", Destination: &v.time},
		&cli.StringFlag{Name: "wall-time", Aliases: []string{"w"}, Usage: "wall-clock limit `DUR` (default 2×time+1s, else 60s)", Destination: &v.wallTime},
		&cli.StringFlag{Name: "extra-time", Aliases: []string{"x"}, Usage: "kill only after time+`DUR`", Destination: &v.extraTime},
		&cli.StringFlag{Name: "mem", Aliases: []string{"m"}, Value: "512M", Usage: "memory limit `SIZE` (cgroup)", Destination: &v.mem},
		&cli.StringFlag{Name: "pids", Aliases: []string{"p"}, Value: "64", Usage: "processes and threads at once", Destination: &v.pids},
		&cli.StringFlag{Name: "cpus", Usage: "CPU bandwidth `F` (e.g. 0.5)", Destination: &v.cpus},
		&cli.StringFlag{Name: "fsize", Aliases: []string{"f"}, Value: "64M", Usage: "largest file `SIZE`", Destination: &v.fsize},
		&cli.StringFlag{Name: "tmp-size", Value: "64M", Usage: "`SIZE` of /box and /tmp", Destination: &v.tmpSize},
		&cli.StringFlag{Name: "open-files", Value: "256", Usage: "RLIMIT_NOFILE", Destination: &v.openFiles},
		&cli.StringFlag{Name: "stack", Value: "8M", Usage: "RLIMIT_STACK `SIZE`", Destination: &v.stack},
		&cli.StringFlag{Name: "output-limit", Value: "1M", Usage: "bytes kept per captured stream", Destination: &v.outputLimit},
		&cli.StringSliceFlag{Name: "bind", Usage: "`HOST:BOX[:ro|rw]` bind (repeatable)", Destination: &v.bind},
		&cli.StringSliceFlag{Name: "copy-in", Usage: "`HOST:BOX` copy into the box", Destination: &v.copyIn},
		&cli.StringSliceFlag{Name: "copy-out", Usage: "`BOX:HOST` copy out of the box", Destination: &v.copyOut},
		&cli.StringSliceFlag{Name: "env", Aliases: []string{"E"}, Usage: "`NAME[=VALUE]` environment variable", Destination: &v.env},
		&cli.StringFlag{Name: "net", Value: "none", Usage: "none or host", Destination: &v.net},
		&cli.StringFlag{Name: "stdin", Aliases: []string{"i"}, Usage: "host `FILE` as standard input", Destination: &v.stdin},
		&cli.StringFlag{Name: "stdout", Aliases: []string{"o"}, Usage: "host `FILE` for standard output", Destination: &v.stdout},
		&cli.StringFlag{Name: "stderr", Aliases: []string{"r"}, Usage: "host `FILE` for standard error", Destination: &v.stderr},
		&cli.BoolFlag{Name: "stream", Usage: "also copy output live to isolate's stdout/stderr", Destination: &v.stream},
		&cli.StringFlag{Name: "chdir", Aliases: []string{"c"}, Value: "/box", Usage: "working `DIR` inside", Destination: &v.chdir},
		&cli.StringFlag{Name: "seccomp", Value: "default", Usage: "default, none, or an OCI seccomp profile `FILE`", Destination: &v.seccomp},
		&cli.BoolFlag{Name: "json", Usage: "print the report as JSON on stdout", Destination: &v.json},
		&cli.StringFlag{Name: "report", Usage: "write the JSON report to `FILE`", Destination: &v.report},
		&cli.StringFlag{Name: "meta", Aliases: []string{"M"}, Usage: "write an ioi/isolate-style meta `FILE`", Destination: &v.meta},
	})
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "one sandboxed run, then everything is torn down",
		ArgsUsage: "-- COMMAND [ARG...]",
		Flags:     runFlags(),
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageErr(err)
		},
		Action: func(c *cli.Context) error {
			if err := requireRoot(); err != nil {
				return err
			}
			spec, err := specFromFlags(c)
			if err != nil {
				return usageErr(err)
			}
			spec.Command = c.Args().Slice()
			return runAndReport(c, spec)
		},
	}
}

// specFromFlags turns the run options into a Spec.
func specFromFlags(c *cli.Context) (*isolate.Spec, error) {
	s := isolate.Defaults()
	s.BoxID = runValues.boxID
	if s.BoxID < -1 {
		return nil, fmt.Errorf("--box-id %d: must be 0 or more", s.BoxID)
	}
	var err error
	durations := []struct {
		name string
		dst  *int64
	}{}
	_ = durations
	if s.CPUTime, err = parseDuration("time", orDefault(runValues.time, "0")); err != nil {
		return nil, err
	}
	if s.WallTime, err = parseDuration("wall-time", orDefault(runValues.wallTime, "0")); err != nil {
		return nil, err
	}
	if s.ExtraTime, err = parseDuration("extra-time", orDefault(runValues.extraTime, "0")); err != nil {
		return nil, err
	}
	v := &runValues
	sizes := []struct {
		name string
		val  *string
		dst  *int64
	}{
		{"mem", &v.mem, &s.Memory}, {"fsize", &v.fsize, &s.FileSize}, {"tmp-size", &v.tmpSize, &s.TmpSize},
		{"stack", &v.stack, &s.Stack}, {"output-limit", &v.outputLimit, &s.OutputLimit},
	}
	for _, sz := range sizes {
		if *sz.dst, err = parseSize(sz.name, *sz.val); err != nil {
			return nil, err
		}
	}
	if s.Pids, err = parseCount("pids", runValues.pids); err != nil {
		return nil, err
	}
	if s.OpenFiles, err = parseCount("open-files", runValues.openFiles); err != nil {
		return nil, err
	}
	if v := runValues.cpus; v != "" && v != "unlimited" {
		if _, err := fmt.Sscanf(v, "%g", &s.CPUs); err != nil || s.CPUs < 0 || strings.ContainsAny(v, " ") {
			return nil, fmt.Errorf("--cpus %q: not a number of CPUs", v)
		}
	}
	lang, err := langFromFlags(c)
	if err != nil {
		return nil, err
	}
	if err := resolveImage(&s, imageFromFlags(c, lang)); err != nil {
		return nil, err
	}
	for _, v := range runValues.bind.Value() {
		b, err := parseBind(v)
		if err != nil {
			return nil, err
		}
		s.Binds = append(s.Binds, b)
	}
	for _, v := range runValues.copyIn.Value() {
		cp, err := parseCopy("copy-in", v)
		if err != nil {
			return nil, err
		}
		s.CopyIn = append(s.CopyIn, cp)
	}
	for _, v := range runValues.copyOut.Value() {
		cp, err := parseCopy("copy-out", v)
		if err != nil {
			return nil, err
		}
		s.CopyOut = append(s.CopyOut, cp)
	}
	if s.Env, err = buildEnv(langEnv(lang), runValues.env.Value()); err != nil {
		return nil, err
	}
	switch runValues.net {
	case "none":
	case "host":
		s.HostNet = true
	default:
		return nil, fmt.Errorf("--net %q: expected none or host", runValues.net)
	}
	s.Stdin, s.Stdout, s.Stderr = runValues.stdin, runValues.stdout, runValues.stderr
	s.Stream = runValues.stream
	s.LiveStdout, s.LiveStderr = os.Stdout, os.Stderr
	s.Chdir = runValues.chdir
	s.Seccomp = runValues.seccomp
	return &s, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// resolveImage maps --image to what the box's system tree comes from:
// "host", a built image's name, a directory, or a squashfs file.
func resolveImage(s *isolate.Spec, name string) error {
	s.Image, s.ImageDir, s.ImageFile = name, "", ""
	switch {
	case name == "" || name == "host":
		s.Image, s.ImageDir = "host", "/"
	case strings.Contains(name, "/"):
		fi, err := os.Stat(name)
		if err != nil {
			return fmt.Errorf("--image %s: %v", name, errors.Unwrap(err))
		}
		if fi.IsDir() {
			s.ImageDir = name
		} else if rootfs.IsSquashfs(name) {
			s.ImageFile = name
		} else {
			return fmt.Errorf("--image %s: neither a directory nor a squashfs file", name)
		}
	default:
		if _, err := rootfs.LookupImage(name); err != nil {
			return fmt.Errorf("--image %s: %v", name, err)
		}
		s.ImageFile = rootfs.ImagePath(name)
	}
	return nil
}

// runAndReport runs spec and prints the report the way the flags ask.
func runAndReport(c *cli.Context, spec *isolate.Spec) error {
	opts, cfg, err := loadHost()
	if err != nil {
		return usageErr(err)
	}
	if err := checkOutputs(runValues.report, runValues.meta); err != nil {
		return usageErr(err)
	}
	// A box made by `isolate init` keeps its /box across runs.
	finish, err := isolate.UsePersistent(spec, cfg)
	if err != nil {
		return usageErr(err)
	}
	rep, err := isolate.Run(spec, opts)
	if ferr := finish(); ferr != nil && err == nil && rep.Status != isolate.StatusXX {
		rep.Status, rep.Message = isolate.StatusXX, "hand the box back: "+ferr.Error()
	}
	if err != nil {
		return usageErr(err)
	}
	if err := emitReport(rep, runValues.json, runValues.report, runValues.meta, runValues.stream); err != nil {
		return &exitError{code: exitSandbox, msg: err.Error()}
	}
	return &exitError{code: exitStatus(rep)}
}

// exitStatus is isolate's exit status for a finished run.
func exitStatus(r *isolate.Report) int {
	switch r.Status {
	case isolate.StatusOK:
		return exitOK
	case isolate.StatusXX:
		return exitSandbox
	}
	return exitFailed
}

// hostOptions is the host's settings, for callers that have already
// reported a broken configuration file (or do not read it).
func hostOptions() isolate.Options {
	opts, _, _ := loadHost()
	return opts
}

// loadHost reads the host's settings: the configuration file, then
// ISOLATE_CGROUP_ROOT from the environment.
func loadHost() (isolate.Options, *isolate.Config, error) {
	cfg, err := isolate.LoadConfig()
	if err != nil {
		return isolate.Options{}, nil, err
	}
	opts := isolate.Options{CgroupRoot: cfg.CgroupRoot, NumBoxes: cfg.NumBoxes}
	if root := os.Getenv("ISOLATE_CGROUP_ROOT"); root != "" {
		opts.CgroupRoot = root
	}
	return opts, cfg, nil
}

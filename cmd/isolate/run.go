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

// runFlags are the options of `run` (and of `exec`).
func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "box-id", Aliases: []string{"b"}, Value: -1, Usage: "box `N` (default: a free one)"},
		&cli.StringFlag{Name: "image", Value: "host", Usage: "root file system: host, an image name, a directory or a squashfs file"},
		&cli.StringFlag{Name: "lang", Usage: "the language `LANG`'s image and environment (isolate langs)"},
		&cli.StringFlag{Name: "time", Aliases: []string{"t"}, Usage: "CPU time limit `DUR` of the whole program"},
		&cli.StringFlag{Name: "wall-time", Aliases: []string{"w"}, Usage: "wall-clock limit `DUR` (default 2×time+1s, else 60s)"},
		&cli.StringFlag{Name: "extra-time", Aliases: []string{"x"}, Usage: "kill only after time+`DUR`"},
		&cli.StringFlag{Name: "mem", Aliases: []string{"m"}, Value: "512M", Usage: "memory limit `SIZE` (cgroup)"},
		&cli.StringFlag{Name: "pids", Aliases: []string{"p"}, Value: "64", Usage: "processes and threads at once"},
		&cli.StringFlag{Name: "cpus", Usage: "CPU bandwidth `F` (e.g. 0.5)"},
		&cli.StringFlag{Name: "fsize", Aliases: []string{"f"}, Value: "64M", Usage: "largest file `SIZE`"},
		&cli.StringFlag{Name: "tmp-size", Value: "64M", Usage: "`SIZE` of /box and /tmp"},
		&cli.StringFlag{Name: "open-files", Value: "256", Usage: "RLIMIT_NOFILE"},
		&cli.StringFlag{Name: "stack", Value: "8M", Usage: "RLIMIT_STACK `SIZE`"},
		&cli.StringFlag{Name: "output-limit", Value: "1M", Usage: "bytes kept per captured stream"},
		&cli.StringSliceFlag{Name: "bind", Usage: "`HOST:BOX[:ro|rw]` bind (repeatable)"},
		&cli.StringSliceFlag{Name: "copy-in", Usage: "`HOST:BOX` copy into the box"},
		&cli.StringSliceFlag{Name: "copy-out", Usage: "`BOX:HOST` copy out of the box"},
		&cli.StringSliceFlag{Name: "env", Aliases: []string{"E"}, Usage: "`NAME[=VALUE]` environment variable"},
		&cli.StringFlag{Name: "net", Value: "none", Usage: "none or host"},
		&cli.StringFlag{Name: "stdin", Aliases: []string{"i"}, Usage: "host `FILE` as standard input"},
		&cli.StringFlag{Name: "stdout", Aliases: []string{"o"}, Usage: "host `FILE` for standard output"},
		&cli.StringFlag{Name: "stderr", Aliases: []string{"r"}, Usage: "host `FILE` for standard error"},
		&cli.BoolFlag{Name: "stream", Usage: "also copy output live to isolate's stdout/stderr"},
		&cli.StringFlag{Name: "chdir", Aliases: []string{"c"}, Value: "/box", Usage: "working `DIR` inside"},
		&cli.StringFlag{Name: "seccomp", Value: "default", Usage: "default, none, or an OCI seccomp profile `FILE`"},
		&cli.BoolFlag{Name: "json", Usage: "print the report as JSON on stdout"},
		&cli.StringFlag{Name: "report", Usage: "write the JSON report to `FILE`"},
		&cli.StringFlag{Name: "meta", Aliases: []string{"M"}, Usage: "write an ioi/isolate-style meta `FILE`"},
	}
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
	s.BoxID = c.Int("box-id")
	if s.BoxID < -1 {
		return nil, fmt.Errorf("--box-id %d: must be 0 or more", s.BoxID)
	}
	var err error
	durations := []struct {
		name string
		dst  *int64
	}{}
	_ = durations
	if s.CPUTime, err = parseDuration("time", orDefault(c.String("time"), "0")); err != nil {
		return nil, err
	}
	if s.WallTime, err = parseDuration("wall-time", orDefault(c.String("wall-time"), "0")); err != nil {
		return nil, err
	}
	if s.ExtraTime, err = parseDuration("extra-time", orDefault(c.String("extra-time"), "0")); err != nil {
		return nil, err
	}
	sizes := []struct {
		name string
		dst  *int64
	}{
		{"mem", &s.Memory}, {"fsize", &s.FileSize}, {"tmp-size", &s.TmpSize},
		{"stack", &s.Stack}, {"output-limit", &s.OutputLimit},
	}
	for _, sz := range sizes {
		if *sz.dst, err = parseSize(sz.name, c.String(sz.name)); err != nil {
			return nil, err
		}
	}
	if s.Pids, err = parseCount("pids", c.String("pids")); err != nil {
		return nil, err
	}
	if s.OpenFiles, err = parseCount("open-files", c.String("open-files")); err != nil {
		return nil, err
	}
	if v := c.String("cpus"); v != "" && v != "unlimited" {
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
	for _, v := range c.StringSlice("bind") {
		b, err := parseBind(v)
		if err != nil {
			return nil, err
		}
		s.Binds = append(s.Binds, b)
	}
	for _, v := range c.StringSlice("copy-in") {
		cp, err := parseCopy("copy-in", v)
		if err != nil {
			return nil, err
		}
		s.CopyIn = append(s.CopyIn, cp)
	}
	for _, v := range c.StringSlice("copy-out") {
		cp, err := parseCopy("copy-out", v)
		if err != nil {
			return nil, err
		}
		s.CopyOut = append(s.CopyOut, cp)
	}
	if s.Env, err = buildEnv(langEnv(lang), c.StringSlice("env")); err != nil {
		return nil, err
	}
	switch c.String("net") {
	case "none":
	case "host":
		s.HostNet = true
	default:
		return nil, fmt.Errorf("--net %q: expected none or host", c.String("net"))
	}
	s.Stdin, s.Stdout, s.Stderr = c.String("stdin"), c.String("stdout"), c.String("stderr")
	s.Stream = c.Bool("stream")
	s.LiveStdout, s.LiveStderr = os.Stdout, os.Stderr
	s.Chdir = c.String("chdir")
	s.Seccomp = c.String("seccomp")
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
	if err := emitReport(rep, c.Bool("json"), c.String("report"), c.String("meta"), c.Bool("stream")); err != nil {
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

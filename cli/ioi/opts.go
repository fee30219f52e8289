package ioi

// The ioi/isolate command line, parsed the way ioi/isolate's getopt_long
// does: options anywhere before "--", short options clustered (-sv) or
// with attached values (-b5, -p60), long options as --opt=value or
// --opt value, unambiguous prefixes of long options, and arguments that
// are not options collected, in order, in front of the command.

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The commands of the ioi form.
const (
	ModeInit        = "init"
	ModeRun         = "run"
	ModeCleanup     = "cleanup"
	ModeVersion     = "version"
	ModePrintCgRoot = "print-cg-root"
	ModeCheckConfig = "check-config"
)

// Options is one ioi/isolate command line.
type Options struct {
	mode    string
	boxID   int
	chdir   string
	cg      bool
	cgMemKB int64 // 0: no cgroup memory limit
	dirs    *dirRules
	noDirs  bool // -D: no default directory rules
	fullEnv bool
	env     []string // -E rules, in order

	fsizeKB, stackKB, memKB, coreKB int64
	openFiles                       int64
	processes                       int64 // 0: unlimited

	stdin, stdout, stderr string
	stderrToStdout        bool

	timeout, wall, extra time.Duration // whole milliseconds, as ioi/isolate keeps them
	meta                 string

	silent, verbose int
	quota           string
	shareNet        bool
	inheritFDs      bool
	ttyHack         bool
	specialFiles    bool
	wait            bool
	asUID, asGID    int
	cgTiming        string // "", "on" or "off": ioi 1.x's --cg-timing / --no-cg-timing
	syscallFlags    int    // --syscalls: ioi 2.4's restrictions, which the default policy always applies

	command []string
}

// Mode is the command: ModeInit, ModeRun, ModeCleanup, ModeVersion,
// ModePrintCgRoot or ModeCheckConfig.
func (o *Options) Mode() string { return o.mode }

// BoxID is the box the command is about (-b).
func (o *Options) BoxID() int { return o.boxID }

// Meta is the meta file (-M): "" none, "-" standard output.
func (o *Options) Meta() string { return o.meta }

// Silent tells whether -s was given: no status line after a run.
func (o *Options) Silent() bool { return o.silent > 0 }

// ioiOpt describes one option: its long name, its short letter (0 for
// none), whether it takes a value (argNone, argRequired, argOptional).
type ioiOpt struct {
	long  string
	short byte
	arg   int
	set   func(o *Options, v string, has bool) error
}

const (
	argNone = iota
	argRequired
	argOptional
)

var ioiOpts = []ioiOpt{
	{"as-uid", 0, argRequired, func(o *Options, v string, _ bool) (err error) { o.asUID, err = ioiUint(v); return }},
	{"as-gid", 0, argRequired, func(o *Options, v string, _ bool) (err error) { o.asGID, err = ioiUint(v); return }},
	{"box-id", 'b', argRequired, func(o *Options, v string, _ bool) (err error) { o.boxID, err = ioiUint(v); return }},
	{"check-config", 0, argNone, modeSetter(ModeCheckConfig)},
	{"chdir", 'c', argRequired, func(o *Options, v string, _ bool) error { o.chdir = v; return nil }},
	{"cg", 0, argNone, func(o *Options, _ string, _ bool) error { o.cg = true; return nil }},
	{"cg-mem", 0, argRequired, func(o *Options, v string, _ bool) error { return ioiKB(&o.cgMemKB, v) }},
	{"cg-timing", 0, argNone, func(o *Options, _ string, _ bool) error { o.cgTiming = "on"; return nil }},
	{"no-cg-timing", 0, argNone, func(o *Options, _ string, _ bool) error { o.cgTiming = "off"; return nil }},
	{"cleanup", 0, argNone, modeSetter(ModeCleanup)},
	{"core", 0, argRequired, func(o *Options, v string, _ bool) error { return ioiKB(&o.coreKB, v) }},
	{"dir", 'd', argRequired, func(o *Options, v string, _ bool) error { return o.dirs.set(v, false) }},
	{"no-default-dirs", 'D', argNone, func(o *Options, _ string, _ bool) error { o.noDirs = true; return nil }},
	{"fsize", 'f', argRequired, func(o *Options, v string, _ bool) error { return ioiKB(&o.fsizeKB, v) }},
	{"env", 'E', argRequired, func(o *Options, v string, _ bool) error {
		if strings.HasPrefix(v, "=") {
			return fmt.Errorf("invalid environment specified: %s", v)
		}
		o.env = append(o.env, v)
		return nil
	}},
	{"extra-time", 'x', argRequired, func(o *Options, v string, _ bool) (err error) { o.extra, err = ioiSeconds("extra-time", v); return }},
	{"full-env", 'e', argNone, func(o *Options, _ string, _ bool) error { o.fullEnv = true; return nil }},
	{"inherit-fds", 0, argNone, func(o *Options, _ string, _ bool) error { o.inheritFDs = true; return nil }},
	{"init", 0, argNone, modeSetter(ModeInit)},
	{"mem", 'm', argRequired, func(o *Options, v string, _ bool) error { return ioiKB(&o.memKB, v) }},
	{"meta", 'M', argRequired, func(o *Options, v string, _ bool) error { o.meta = v; return nil }},
	{"processes", 'p', argOptional, func(o *Options, v string, has bool) error {
		if !has {
			o.processes = 0
			return nil
		}
		n, err := ioiUint(v)
		o.processes = int64(n)
		return err
	}},
	{"quota", 'q', argRequired, func(o *Options, v string, _ bool) error {
		b, i, ok := strings.Cut(v, ",")
		if _, err := ioiUint(b); !ok || err != nil {
			return fmt.Errorf("invalid quota specified: %s", v)
		}
		if _, err := ioiUint(i); err != nil {
			return fmt.Errorf("invalid quota specified: %s", v)
		}
		o.quota = v
		return nil
	}},
	{"run", 0, argNone, modeSetter(ModeRun)},
	{"share-net", 0, argNone, func(o *Options, _ string, _ bool) error { o.shareNet = true; return nil }},
	{"silent", 's', argNone, func(o *Options, _ string, _ bool) error { o.silent++; return nil }},
	{"stack", 'k', argRequired, func(o *Options, v string, _ bool) error { return ioiKB(&o.stackKB, v) }},
	{"open-files", 'n', argRequired, func(o *Options, v string, _ bool) error {
		n, err := ioiUint(v)
		o.openFiles = int64(n)
		return err
	}},
	{"print-cg-root", 0, argNone, modeSetter(ModePrintCgRoot)},
	{"special-files", 0, argNone, func(o *Options, _ string, _ bool) error { o.specialFiles = true; return nil }},
	{"stderr", 'r', argRequired, func(o *Options, v string, _ bool) error { o.stderr, o.stderrToStdout = v, false; return nil }},
	{"stderr-to-stdout", 0, argNone, func(o *Options, _ string, _ bool) error { o.stderr, o.stderrToStdout = "", true; return nil }},
	{"stdin", 'i', argRequired, func(o *Options, v string, _ bool) error { o.stdin = v; return nil }},
	{"stdout", 'o', argRequired, func(o *Options, v string, _ bool) error { o.stdout = v; return nil }},
	{"syscalls", 0, argRequired, func(o *Options, v string, _ bool) (err error) { o.syscallFlags, err = ioiUint(v); return }},
	{"time", 't', argRequired, func(o *Options, v string, _ bool) (err error) { o.timeout, err = ioiSeconds("time", v); return }},
	{"tty-hack", 0, argNone, func(o *Options, _ string, _ bool) error { o.ttyHack = true; return nil }},
	{"verbose", 'v', argNone, func(o *Options, _ string, _ bool) error { o.verbose++; return nil }},
	{"version", 0, argNone, modeSetter(ModeVersion)},
	{"wait", 0, argNone, func(o *Options, _ string, _ bool) error { o.wait = true; return nil }},
	{"wall-time", 'w', argRequired, func(o *Options, v string, _ bool) (err error) { o.wall, err = ioiSeconds("wall-time", v); return }},
}

func modeSetter(mode string) func(o *Options, _ string, _ bool) error {
	return func(o *Options, _ string, _ bool) error {
		if o.mode != "" && o.mode != mode {
			return fmt.Errorf("only one command is allowed (--%s and --%s)", o.mode, mode)
		}
		o.mode = mode
		return nil
	}
}

// Parse reads an ioi/isolate command line (without the program name).
func Parse(args []string) (*Options, error) {
	o := &Options{processes: 1, openFiles: 64, asUID: -1, asGID: -1, dirs: newDirRules()}
	var nonOpts []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			nonOpts = append(nonOpts, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name, val, has := strings.Cut(a[2:], "=")
			opt, err := findLong(name)
			if err != nil {
				return nil, err
			}
			switch opt.arg {
			case argNone:
				if has {
					return nil, fmt.Errorf("option '--%s' doesn't allow an argument", opt.long)
				}
			case argRequired:
				if !has {
					if i+1 >= len(args) {
						return nil, fmt.Errorf("option '--%s' requires an argument", opt.long)
					}
					i++
					val, has = args[i], true
				}
			}
			if err := opt.set(o, val, has); err != nil {
				return nil, fmt.Errorf("--%s: %w", opt.long, err)
			}
		case strings.HasPrefix(a, "-") && a != "-":
			for j := 1; j < len(a); j++ {
				opt := findShort(a[j])
				if opt == nil {
					return nil, fmt.Errorf("invalid option -- '%c'", a[j])
				}
				val, has := "", false
				switch {
				case opt.arg != argNone && j+1 < len(a):
					val, has = a[j+1:], true
					j = len(a)
				case opt.arg == argRequired:
					if i+1 >= len(args) {
						return nil, fmt.Errorf("option requires an argument -- '%c'", a[j])
					}
					i++
					val, has = args[i], true
				}
				if err := opt.set(o, val, has); err != nil {
					return nil, fmt.Errorf("-%c: %w", opt.short, err)
				}
			}
		default:
			nonOpts = append(nonOpts, a)
		}
	}
	o.command = nonOpts
	switch o.mode {
	case "":
		return nil, fmt.Errorf("please specify an isolate command (e.g. --init, --run)")
	case ModeRun:
		if len(o.command) == 0 {
			return nil, fmt.Errorf("--run mode requires a command to run")
		}
	default:
		if len(o.command) > 0 {
			return nil, fmt.Errorf("--%s mode takes no parameters", o.mode)
		}
	}
	if (o.asUID < 0) != (o.asGID < 0) {
		return nil, fmt.Errorf("--as-uid and --as-gid must be used either both or none")
	}
	return o, nil
}

// findLong finds a long option by its name or an unambiguous prefix.
func findLong(name string) (*ioiOpt, error) {
	var found []*ioiOpt
	for i := range ioiOpts {
		o := &ioiOpts[i]
		if o.long == name {
			return o, nil
		}
		if strings.HasPrefix(o.long, name) && name != "" {
			found = append(found, o)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("unrecognized option '--%s'", name)
	case 1:
		return found[0], nil
	}
	return nil, fmt.Errorf("option '--%s' is ambiguous", name)
}

func findShort(c byte) *ioiOpt {
	for i := range ioiOpts {
		if ioiOpts[i].short == c {
			return &ioiOpts[i]
		}
	}
	return nil
}

// ioiUint reads a decimal number that fits a C int, as ioi/isolate's
// opt_uint does.
func ioiUint(v string) (int, error) {
	n, err := strconv.ParseUint(v, 10, 31)
	if err != nil {
		return 0, fmt.Errorf("invalid numeric parameter: %s", v)
	}
	return int(n), nil
}

func ioiKB(dst *int64, v string) error {
	n, err := ioiUint(v)
	*dst = int64(n)
	return err
}

// ioiSeconds reads a time in fractional seconds; ioi/isolate keeps it in
// whole milliseconds (1000*atof(value), truncated), and so do we.
func ioiSeconds(name, v string) (time.Duration, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 || f > 1e6 || f != f {
		return 0, fmt.Errorf("invalid %s: %s (seconds, fractions allowed)", name, v)
	}
	return time.Duration(int64(f*1000)) * time.Millisecond, nil
}

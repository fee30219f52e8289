package cmdline

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// urfave/cli looks flags up by name with Names(), which runs a regexp over
// each name on every call; before an action it checks IsSet for every
// flag, and each check scans every flag's names: O(flags²) regexps, about
// a millisecond for run's 28 flags. These wrappers compute the names once,
// without the regexp (flagNames); every other method (help, usage,
// values) is the wrapped flag's own.

type namedString struct {
	*cli.StringFlag
	names []string
}

func (f *namedString) Names() []string { return f.names }

type namedStringSlice struct {
	*cli.StringSliceFlag
	names []string
}

func (f *namedStringSlice) Names() []string { return f.names }

type namedBool struct {
	*cli.BoolFlag
	names []string
}

func (f *namedBool) Names() []string { return f.names }

type namedInt struct {
	*cli.IntFlag
	names []string
}

func (f *namedInt) Names() []string { return f.names }

// cachedNames wraps each flag so that its names are computed once.
func cachedNames(flags []cli.Flag) []cli.Flag {
	out := make([]cli.Flag, len(flags))
	for i, f := range flags {
		switch t := f.(type) {
		case *cli.StringFlag:
			out[i] = &namedString{t, flagNames(t.Name, t.Aliases)}
		case *cli.StringSliceFlag:
			out[i] = &namedStringSlice{t, flagNames(t.Name, t.Aliases)}
		case *cli.BoolFlag:
			out[i] = &namedBool{t, flagNames(t.Name, t.Aliases)}
		case *cli.IntFlag:
			out[i] = &namedInt{t, flagNames(t.Name, t.Aliases)}
		default:
			out[i] = f
		}
	}
	return out
}

// flagNames is cli.FlagNames without its regexp, which alone took a third
// of a command line's parsing (BenchmarkParse): like it, each name ends
// before its first comma or space (what the regexp "[, ]+.*" removes).
func flagNames(name string, aliases []string) []string {
	names := make([]string, 0, 1+len(aliases))
	for _, n := range append([]string{name}, aliases...) {
		if i := strings.IndexAny(n, ", "); i >= 0 {
			n = n[:i]
		}
		names = append(names, n)
	}
	return names
}

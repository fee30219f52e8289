package cmdline

import (
	"github.com/urfave/cli/v2"
)

// urfave/cli looks flags up by name with Names(), which runs a regexp over
// each name on every call; before an action it checks IsSet for every
// flag, and each check scans every flag's names: O(flags²) regexps, about
// a millisecond for run's 28 flags. These wrappers compute the names once;
// every other method (help, usage, values) is the wrapped flag's own.

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
		names := f.Names()
		switch t := f.(type) {
		case *cli.StringFlag:
			out[i] = &namedString{t, names}
		case *cli.StringSliceFlag:
			out[i] = &namedStringSlice{t, names}
		case *cli.BoolFlag:
			out[i] = &namedBool{t, names}
		case *cli.IntFlag:
			out[i] = &namedInt{t, names}
		default:
			out[i] = f
		}
	}
	return out
}

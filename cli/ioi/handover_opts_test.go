package ioi

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
)

// handoverC is the CLI's handover (cmd/isolate/handover.c): it reads an
// ioi command line before Go starts, with a table of its own.
const handoverC = "../../cmd/isolate/handover.c"

// cOption is one entry of handover.c's table of the ioi options.
type cOption struct {
	short byte
	arg   int
}

// handoverOptions reads handover.c's table of the ioi options: every line
// between its markers must be one entry.
func handoverOptions(t *testing.T, src string) map[string]cOption {
	t.Helper()
	_, rest, ok := strings.Cut(src, "/* ioi options: begin */\n")
	table, _, ok2 := strings.Cut(rest, "/* ioi options: end */")
	if !ok || !ok2 {
		t.Fatalf("%s: no table of the ioi options between its markers", handoverC)
	}
	entry := regexp.MustCompile(`^\{"([a-z-]+)", (0|'([A-Za-z])'), IOI_ARG_(NONE|REQUIRED|OPTIONAL)\},$`)
	kinds := map[string]int{"NONE": argNone, "REQUIRED": argRequired, "OPTIONAL": argOptional}
	opts := map[string]cOption{}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		m := entry.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			t.Fatalf("%s: %q is no entry of the ioi options' table", handoverC, line)
		}
		if _, dup := opts[m[1]]; dup {
			t.Errorf("%s: --%s twice", handoverC, m[1])
		}
		var short byte
		if m[3] != "" {
			short = m[3][0]
		}
		opts[m[1]] = cOption{short, kinds[m[4]]}
	}
	return opts
}

// The handover finds the meta file of an ioi command line the service
// ended during (the service parsed it with ioiOpts): its table must know
// every option ioiOpts knows, with the same letter and the same kind of
// value, and no other.
func TestHandoverKnowsTheOptions(t *testing.T) {
	b, err := os.ReadFile(handoverC)
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	c := handoverOptions(t, src)
	for _, o := range ioiOpts {
		got, ok := c[o.long]
		switch {
		case !ok:
			t.Errorf("--%s: not in %s", o.long, handoverC)
		case got != cOption{o.short, o.arg}:
			t.Errorf("--%s: %s has letter %q, argument kind %d; ioiOpts %q, %d", o.long, handoverC, got.short, got.arg, o.short, o.arg)
		}
		delete(c, o.long)
	}
	for name := range c {
		t.Errorf("--%s: in %s, not in ioiOpts", name, handoverC)
	}

	// Its decision whether a command line is a run names the ioi form's
	// commands: those options of ioiOpts that set the mode.
	var commands []string
	for _, o := range ioiOpts {
		var opts Options
		if o.arg == argNone && o.set(&opts, "", false) == nil && opts.mode != "" {
			if opts.mode != o.long {
				t.Errorf("--%s sets the command %q", o.long, opts.mode)
			}
			commands = append(commands, o.long)
		}
	}
	_, isRun, _ := strings.Cut(src, "static int is_run(")
	isRun, _, _ = strings.Cut(isRun, "\n}\n")
	var named []string
	for _, m := range regexp.MustCompile(`str_eq\(a, "--([a-z-]+)"\)`).FindAllStringSubmatch(isRun, -1) {
		named = append(named, m[1])
	}
	sort.Strings(commands)
	sort.Strings(named)
	if strings.Join(named, " ") != strings.Join(commands, " ") || len(commands) == 0 {
		t.Errorf("%s's is_run names the commands %q; ioiOpts has %q", handoverC, named, commands)
	}

	// Every ioi option the request's fields name is one the parsers know.
	for _, f := range api.Fields {
		if f.IOI != "" && findExactLong(f.IOI) == nil {
			t.Errorf("api.Fields: %s's ioi option --%s is not in ioiOpts", f.JSON, f.IOI)
		}
	}
}

func findExactLong(name string) *ioiOpt {
	for i := range ioiOpts {
		if ioiOpts[i].long == name {
			return &ioiOpts[i]
		}
	}
	return nil
}

package cmdline

import (
	"testing"

	"github.com/isolate-sandbox/isolate/cli/ioi"
)

// A command line is the ioi form by any of the ioi parser's commands
// before "--" (the handover in cmd/isolate names the same ones, checked
// in package ioi), and by nothing else.
func TestIOIFormByItsCommands(t *testing.T) {
	for _, mode := range []string{ioi.ModeInit, ioi.ModeRun, ioi.ModeCleanup, ioi.ModeVersion, ioi.ModePrintCgRoot, ioi.ModeCheckConfig} {
		if !IsIOIForm([]string{"-b", "1", "--" + mode}) {
			t.Errorf("--%s: not the ioi form", mode)
		}
		if IsIOIForm([]string{"-b", "1", "--", "--" + mode}) {
			t.Errorf("-- --%s: the ioi form", mode)
		}
	}
	for _, args := range [][]string{{"run", "--", "/bin/true"}, {"-b", "1", "--meta=m"}, {"--box-id", "1"}} {
		if IsIOIForm(args) {
			t.Errorf("%q: the ioi form", args)
		}
	}
}

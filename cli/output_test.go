package cmdline

import (
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
)

func TestSummaryEscapesTheMessage(t *testing.T) {
	line := summary(&isolate.Report{Status: isolate.StatusXX, Message: "copy-out /box/a\nisolate: OK exit=0"})
	if strings.Contains(line, "\n") {
		t.Errorf("summary spans lines: %q", line)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// An image whose packages cannot be installed fails with the tail of the
// build's log, and leaves no image behind.
func TestImageBuildFailureShowsTheLog(t *testing.T) {
	needRoot(t)
	images, defs := withImagesDir(t)
	os.WriteFile(filepath.Join(defs, "broken.json"), []byte(`{"name": "broken", "packages": ["isolate-no-such-package"], "version": ["true"], "source": "x", "run": ["true"]}`), 0o644)
	res := isolateCmd(t, "", "image", "build", "broken")
	if res.Code == 0 || !strings.Contains(res.Stderr, "isolate-no-such-package") {
		t.Fatalf("broken image: exit %d, stderr %q; want a failure quoting the log", res.Code, res.Stderr)
	}
	if m, _ := filepath.Glob(filepath.Join(images, "broken.sqfs")); len(m) != 0 {
		t.Errorf("a failed build left %v", m)
	}
}

// InitArg reaches Go only when the box's C init did not take the process
// (it needs its namespace flags): a clear error, not a second supervisor.
func TestInitArgumentAloneIsRefused(t *testing.T) {
	needRoot(t)
	out, err := exec.Command(isolateBin, boxinit.InitArg).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "init") {
		t.Errorf("isolate %s: %v %q", boxinit.InitArg, err, out)
	}
}

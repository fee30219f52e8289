package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A meta file (-M) or report (--report) that is not a regular file but
// one the caller can write is taken, as ioi/isolate takes it: /dev/null,
// and a FIFO someone reads, which gets the meta file.
func TestMetaFileNotRegular(t *testing.T) {
	ioiBoxRoot(t)
	ioiBox(t, 342)
	if res := isolateCmd(t, "", "-b", "342", "-M", "/dev/null", "--run", "--", "/bin/true"); res.Code != 0 {
		t.Errorf("-M /dev/null: exit %d, stderr %q", res.Code, res.Stderr)
	}
	if res := isolateCmd(t, "", "run", "--report", "/dev/null", "--", "/bin/true"); res.Code != 0 {
		t.Errorf("--report /dev/null: exit %d, stderr %q", res.Code, res.Stderr)
	}
	fifo := filepath.Join(shareDir(t), "meta")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The reader holds the FIFO open for writing too, so that it reads
	// to the end of what isolate wrote, not of whoever opened it first.
	r, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if res := isolateCmd(t, "", "-b", "342", "-M", fifo, "--run", "--", "/bin/true"); res.Code != 0 {
		t.Fatalf("-M FIFO: exit %d, stderr %q", res.Code, res.Stderr)
	}
	buf := make([]byte, 4096)
	n, _ := r.Read(buf)
	if !strings.Contains(string(buf[:n]), "exitcode:0\n") {
		t.Errorf("the meta file through the FIFO: %q", buf[:n])
	}
}

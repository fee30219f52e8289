package main

import (
	"os"
	"os/exec"
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

// ioi/isolate 2.6's configuration as its Debian package installs it (in
// a file at a path of the test's, its box root a directory of the
// test's): the ioi form's calls work under it, --check-config takes it,
// and `isolate check` says how its settings were taken.
func TestIOIConfigurationAsShipped(t *testing.T) {
	needRoot(t)
	text, err := os.ReadFile("../../isolate/testdata/ioi-2.6-debian.cf")
	if err != nil {
		t.Fatal(err)
	}
	dir := shareDir(t)
	cfg := filepath.Join(dir, "isolate")
	boxes := filepath.Join(dir, "boxes")
	conf := strings.Replace(string(text), "box_root = /var/lib/isolate", "box_root = "+boxes, 1)
	if conf == string(text) {
		t.Fatal("the shipped configuration has no box_root = /var/lib/isolate")
	}
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ISOLATE_CONFIG", cfg)
	if res := isolateCmd(t, "", "--check-config"); res.Code != 0 || res.Stderr != "" {
		t.Fatalf("--check-config: exit %d, stderr %q", res.Code, res.Stderr)
	}
	res := isolateCmd(t, "", "--cg", "-b", "345", "--init")
	if res.Code != 0 || strings.TrimSpace(res.Stdout) != filepath.Join(boxes, "345") {
		t.Fatalf("--init: exit %d, stdout %q, stderr %q", res.Code, res.Stdout, res.Stderr)
	}
	defer isolateCmd(t, "", "-b", "345", "--cleanup")
	if res := isolateCmd(t, "", "--cg", "-b", "345", "-M", "-", "--run", "--", "/bin/echo", "shipped"); res.Code != 0 || !strings.HasPrefix(res.Stdout, "shipped\n") {
		t.Errorf("--run: exit %d, stdout %q, stderr %q", res.Code, res.Stdout, res.Stderr)
	}
	if res := isolateCmd(t, "", "--cg", "-b", "345", "--cleanup"); res.Code != 0 {
		t.Errorf("--cleanup: exit %d, stderr %q", res.Code, res.Stderr)
	}
	check := isolateCmd(t, "", "check")
	for _, want := range []string{"ok   configuration          " + cfg, "note configuration          subid_user = isolate", "note configuration          cg_root = auto:/run/isolate/cgroup"} {
		if !strings.Contains(check.Stdout, want) {
			t.Errorf("isolate check says nothing of %q:\n%s", want, check.Stdout)
		}
	}
}

// isolate started setuid root (as ioi/isolate's package's
// dpkg-statoverride would leave /usr/bin/isolate) refuses to run, with the
// fix, before anything runs with root's rights.
func TestRefusesSetuid(t *testing.T) {
	needRoot(t)
	bin := filepath.Join(shareDir(t), "isolate")
	data, err := os.ReadFile(isolateBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"version"}, {"-b", "346", "--run", "--", "/bin/true"}, {"run", "--", "/bin/true"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = handoverEnv("")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		res := runResult(t, cmd)
		if res.Code != 2 || !strings.Contains(res.Stderr, "dpkg-statoverride --remove /usr/bin/isolate") || res.Stdout != "" {
			t.Errorf("setuid %v: exit %d, stdout %q, stderr %q", args, res.Code, res.Stdout, res.Stderr)
		}
	}
}

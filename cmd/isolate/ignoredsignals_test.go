package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/isolate"
)

// SIGUSR1, SIGUSR2, SIGPIPE and SIGTTOU sent to isolate mid-run are
// ignored, as ioi/isolate ignores them: in process and handed over, in
// the ioi form and the native one, the run goes on and ends as it would
// have (the CLI neither dies nor stops), and the program has the default
// actions for them.
func TestIgnoredSignals(t *testing.T) {
	needRoot(t)
	svc := ownService(t)
	machineBox(t, 936)
	dir := shareDir(t)
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTTOU} {
		for _, mode := range []struct{ name, sock string }{{"in process", ""}, {"handed over", svc.cliSock}} {
			for _, ioiForm := range []bool{true, false} {
				name := fmt.Sprintf("%v %s (ioi form %v)", sig, mode.name, ioiForm)
				if end := ignoredSignalRun(t, mode.sock, dir, sig, ioiForm); end != "" {
					t.Errorf("%s: %s", name, end)
				}
			}
		}
	}
}

// ignoredSignalRun starts a run whose program waits for a file to
// appear in a directory bound into its box, sends sig to the CLI once the
// program runs, then makes the file, and says what went wrong ("": the
// run ended as if no signal came).
func ignoredSignalRun(t *testing.T, sock, dir string, sig syscall.Signal, ioiForm bool) string {
	t.Helper()
	meta := filepath.Join(dir, "meta")
	os.Remove(meta)
	shared := filepath.Join(dir, "shared")
	os.RemoveAll(shared)
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	// The program then prints the signals it ignores (its grep's SigIgn).
	const program = "while [ ! -e /shared/go ]; do sleep 0.01; done; echo went; grep SigIgn /proc/self/status"
	id := 937
	args := []string{"run", "--json", "-b", "937", "--bind", shared + ":/shared:ro", "--", "/bin/sh", "-c", program}
	if ioiForm {
		id = 936
		args = []string{"-b", "936", "-M", meta, "-p2", "--dir=/shared=" + shared, "--run", "--", "/bin/sh", "-c", program}
	}
	cmd := exec.Command(isolateBin, args...)
	cmd.Env = handoverEnv(sock)
	// A process group of its own, whose parent is in another group of
	// the session: the kernel would not discard a SIGTTOU to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	ended := false
	waitFor(t, "the program", func() bool {
		select {
		case <-exited:
			ended = true
		default:
		}
		return ended || len(boxProcesses(id, "sh")) > 0
	})
	if ended {
		return fmt.Sprintf("isolate ended before the signal: %v, stdout %q, stderr %q", cmd.ProcessState, out.String(), errb.String())
	}
	cmd.Process.Signal(sig)
	if err := os.WriteFile(filepath.Join(shared, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		state := processStateLetter(cmd.Process.Pid)
		cmd.Process.Kill()
		cmd.Process.Signal(syscall.SIGCONT)
		<-exited
		waitFor(t, "the box's processes to end", func() bool { return len(boxProcesses(id, "")) == 0 })
		return fmt.Sprintf("isolate did not end (process state %s)", state)
	}
	waitFor(t, "the box's processes and cgroup to be gone", func() bool { return len(boxLeftovers(id)) == 0 })
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return fmt.Sprintf("isolate died of %v; stderr %q", ws.Signal(), errb.String())
	}
	stdout := out.String()
	if ioiForm {
		m, _ := os.ReadFile(meta)
		if ws.ExitStatus() != 0 || !strings.Contains(string(m), "exitcode:0") {
			return fmt.Sprintf("exit %d, meta %q, stderr %q", ws.ExitStatus(), m, errb.String())
		}
	} else {
		var rep isolate.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil || ws.ExitStatus() != 0 || rep.Status != isolate.StatusOK {
			return fmt.Sprintf("exit %d, report %s %q (%v), stderr %q", ws.ExitStatus(), rep.Status, rep.Message, err, errb.String())
		}
		stdout = rep.Stdout
	}
	if !strings.Contains(stdout, "went\n") || !strings.Contains(stdout, "SigIgn:\t0000000000000000\n") {
		return fmt.Sprintf("the program printed %q, want its line and no ignored signal", stdout)
	}
	return ""
}

// processStateLetter is a process's state as /proc shows it (T: stopped).
func processStateLetter(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "gone"
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return "?"
}

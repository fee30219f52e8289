package isolate_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
)

func startSession(t *testing.T, h *isolate.Host, spec *api.Spec) *isolate.Session {
	t.Helper()
	s, err := h.StartSession(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func runIn(t *testing.T, s *isolate.Session, args ...string) *api.Report {
	t.Helper()
	rep, err := s.Run(isolate.SessionCommand{Args: args, WallTime: 20 * time.Second}, isolate.IO{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A session keeps its files and its processes between commands, and each
// command gets its own report.
func TestSessionKeepsState(t *testing.T) {
	needRoot(t)
	h := newHost(t)
	s := startSession(t, h, &api.Spec{})
	if rep := runIn(t, s, "sh", "-c", "echo hello > /box/a; echo $$"); rep.Status != api.StatusOK || rep.Stdout == "" {
		t.Fatalf("first command: %+v", rep)
	}
	rep := runIn(t, s, "cat", "/box/a")
	if rep.Status != api.StatusOK || rep.Stdout != "hello\n" {
		t.Fatalf("second command saw %q (%s %s)", rep.Stdout, rep.Status, rep.Message)
	}
	// A process left running in the background is there for the next.
	bg, err := s.Start(isolate.SessionCommand{Args: []string{"sh", "-c", "echo $$ > /tmp/bg; exec sleep 1000"}}, isolate.IO{})
	if err != nil {
		t.Fatal(err)
	}
	var pid string
	for i := 0; i < 200 && pid == ""; i++ {
		pid = strings.TrimSpace(runIn(t, s, "cat", "/tmp/bg").Stdout)
		time.Sleep(10 * time.Millisecond)
	}
	if rep := runIn(t, s, "kill", "-0", pid); rep.Status != api.StatusOK {
		t.Fatalf("the background process %s is not there: %+v", pid, rep)
	}
	if err := bg.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if rep := bg.Wait(); rep.Status != api.StatusSG || rep.Signal != int(syscall.SIGTERM) {
		t.Fatalf("signalled background command: %s %d %s", rep.Status, rep.Signal, rep.Message)
	}
	// Exit codes, a missing program, a wall time.
	if rep := runIn(t, s, "sh", "-c", "exit 3"); rep.Status != api.StatusRE || rep.ExitCode != 3 {
		t.Fatalf("exit 3: %+v", rep)
	}
	if rep := runIn(t, s, "/no/such/program"); rep.Status != api.StatusRE || rep.ExitCode != 127 {
		t.Fatalf("missing program: %s %d %s", rep.Status, rep.ExitCode, rep.Message)
	}
	rep, err = s.Run(isolate.SessionCommand{Args: []string{"sleep", "100"}, WallTime: 200 * time.Millisecond}, isolate.IO{})
	if err != nil || rep.Status != api.StatusTO || rep.Limit != api.LimitWall {
		t.Fatalf("wall time: %v %+v", err, rep)
	}
	// CPU time is the command's own.
	rep = runIn(t, s, "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	if rep.Status != api.StatusOK || rep.CPUTime <= 0 {
		t.Fatalf("busy loop: %+v", rep)
	}
	if u, err := s.Usage(); err != nil || u.CPUTime < time.Duration(rep.CPUTime*float64(time.Second)) || u.PidsPeak < 2 {
		t.Fatalf("usage %+v (%v) against the command's %v s", u, err, rep.CPUTime)
	}
}

// Streams: stdin from a reader, live output, stderr apart.
func TestSessionStreams(t *testing.T) {
	needRoot(t)
	s := startSession(t, newHost(t), &api.Spec{})
	var live bytes.Buffer
	rep, err := s.Run(isolate.SessionCommand{Args: []string{"sh", "-c", "cat; echo err >&2"}},
		isolate.IO{Stdin: strings.NewReader("in\n"), Stdout: &live})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stdout != "in\n" || live.String() != "in\n" || rep.Stderr != "err\n" {
		t.Fatalf("stdout %q live %q stderr %q", rep.Stdout, live.String(), rep.Stderr)
	}
	// A background process that keeps the command's output open does not
	// keep its report waiting.
	rep = runIn(t, s, "sh", "-c", "echo first; sleep 1000 &")
	if rep.Status != api.StatusOK || rep.Stdout != "first\n" {
		t.Fatalf("left a process: %+v", rep)
	}
}

// The session's memory limit is the whole session's: a command beyond it
// is ML, and the session lives on.
func TestSessionMemoryLimit(t *testing.T) {
	needRoot(t)
	s := startSession(t, newHost(t), &api.Spec{MemoryBytes: 64 << 20})
	rep := runIn(t, s, "python3", "-c", "x = bytearray(200 << 20); x[::4096] = b'x' * len(x[::4096])")
	if rep.Status != api.StatusML {
		t.Fatalf("200 MiB under 64 MiB: %s %s", rep.Status, rep.Message)
	}
	if rep := runIn(t, s, "true"); rep.Status != api.StatusOK {
		t.Fatalf("after ML: %+v", rep)
	}
}

// Files: written and read by the caller, seen by the box; no link leads
// out of /box, no FIFO holds the service.
func TestSessionFiles(t *testing.T) {
	needRoot(t)
	s := startSession(t, newHost(t), &api.Spec{})
	if n, err := s.WriteFile("dir/sub/f.txt", strings.NewReader("content"), 0o644); err != nil || n != 7 {
		t.Fatalf("write: %d %v", n, err)
	}
	if rep := runIn(t, s, "cat", "/box/dir/sub/f.txt"); rep.Stdout != "content" {
		t.Fatalf("the box reads %q", rep.Stdout)
	}
	runIn(t, s, "sh", "-c", "echo made > /box/made; ln -s /etc/passwd /box/link; mkfifo /box/fifo")
	f, info, err := s.OpenFile("made")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "made\n" || info.Size != 5 {
		t.Fatalf("read %q %+v", b, info)
	}
	for _, p := range []string{"link", "fifo", "/etc/passwd", "../etc/passwd"} {
		if f, _, err := s.OpenFile(p); err == nil {
			f.Close()
			t.Errorf("opened %s", p)
		}
	}
	if _, err := s.WriteFile("link", strings.NewReader("x"), 0o644); err == nil {
		t.Error("wrote through a link")
	}
	if _, err := s.WriteFile("fifo", strings.NewReader("x"), 0o644); err == nil {
		t.Error("wrote into a FIFO")
	}
	var fe *api.FieldError
	if _, err := s.Stat("/etc/passwd"); !errors.As(err, &fe) || fe.Field != "path" {
		t.Errorf("stat outside /box and /tmp: %v", err)
	}
	if info, err := s.Stat("link"); err != nil || info.Mode&os.ModeSymlink == 0 {
		t.Errorf("stat of a link: %+v %v", info, err)
	}
	entries, err := s.List("/box", 100)
	if err != nil || len(entries) != 4 {
		t.Fatalf("list: %v %+v", err, entries)
	}
	if err := s.Remove("dir"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat("dir"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after remove: %v", err)
	}
	if rep := runIn(t, s, "sh", "-c", "test ! -e /box/dir && stat -c %U /box/made"); rep.Status != api.StatusOK {
		t.Fatalf("box view after remove: %+v", rep)
	}
}

// Close ends everything in the session; a command running then is XX.
func TestSessionClose(t *testing.T) {
	needRoot(t)
	h := newHost(t)
	s, err := h.StartSession(context.Background(), &api.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Start(isolate.SessionCommand{Args: []string{"sleep", "1000"}}, isolate.IO{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if rep := p.Wait(); rep.Status != api.StatusXX {
		t.Fatalf("command of a closed session: %+v", rep)
	}
	if _, err := s.Run(isolate.SessionCommand{Args: []string{"true"}}, isolate.IO{}); !errors.Is(err, isolate.ErrSessionEnded) {
		t.Fatalf("command after close: %v", err)
	}
	<-s.Done()
}

// The parts of a session's time to interactive, in-process (isolate bench
// --sessions measures it through the service).
func BenchmarkSessionInteractive(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	h, err := isolate.NewHost(&isolate.Config{BoxRoot: isolate.DefaultBoxRoot, NumBoxes: isolate.DefaultNumBoxes})
	if err != nil {
		b.Fatal(err)
	}
	var start, run, end time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s, err := h.StartSession(context.Background(), &api.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if rep, err := s.Run(isolate.SessionCommand{Args: []string{"python3", "-V"}}, isolate.IO{}); err != nil || rep.Status != api.StatusOK {
			b.Fatal(err, rep)
		}
		t2 := time.Now()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		start, run, end = start+t1.Sub(t0), run+time.Since(t1)-time.Since(t2), end+time.Since(t2)
	}
	b.ReportMetric(float64(start.Microseconds())/float64(b.N)/1000, "start-ms")
	b.ReportMetric(float64(run.Microseconds())/float64(b.N)/1000, "run-ms")
	b.ReportMetric(float64(end.Microseconds())/float64(b.N)/1000, "close-ms")
}

// Under --seccomp none a session's command that makes init its tracer
// gets the verdict it earned (SG, its signal), and none makes a vsock
// socket.
func TestSessionTracemeAndVsock(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs python3 on the host")
	}
	h := newHost(t)
	s := startSession(t, h, &api.Spec{Seccomp: "none"})
	rep := runIn(t, s, "python3", "-c", `import ctypes, os, signal
ctypes.CDLL(None).ptrace(0, 0, 0, 0)
os.kill(os.getpid(), signal.SIGSEGV)`)
	if rep.Status != api.StatusSG || rep.Signal != 11 {
		t.Errorf("PTRACE_TRACEME then SIGSEGV: %s signal %d exit %d (%s)", rep.Status, rep.Signal, rep.ExitCode, rep.Message)
	}
	rep = runIn(t, s, "python3", "-c", `import socket
try:
    socket.socket(40, socket.SOCK_STREAM)
    print("made")
except OSError as e:
    print(e.errno)`)
	if rep.Status != api.StatusOK || rep.Stdout != "97\n" {
		t.Errorf("a vsock socket under seccomp none: %s %q %q", rep.Status, rep.Stdout, rep.Stderr)
	}
}

// A command's CPU time bound ends it (RLIMIT_CPU on its processes):
// TO, limit cpu, long before its wall time.
func TestSessionCommandCPUTime(t *testing.T) {
	needRoot(t)
	h := newHost(t)
	s := startSession(t, h, &api.Spec{})
	rep, err := s.Run(isolate.SessionCommand{Args: []string{"sh", "-c", "while :; do :; done"}, CPUTime: time.Second, WallTime: 60 * time.Second}, isolate.IO{})
	if err != nil {
		t.Fatal(err)
	}
	// (The kernel counts RLIMIT_CPU in scheduler ticks: under load the
	// exact CPU time the report gives may read below the second.)
	if rep.Status != api.StatusTO || rep.Limit != api.LimitCPU || rep.CPUTime < 0.5 || rep.WallTime >= 60 {
		t.Errorf("%s (%s) limit %q, cpu %.2fs, wall %.2fs: want TO, limit cpu", rep.Status, rep.Message, rep.Limit, rep.CPUTime, rep.WallTime)
	}
	// A program that ignores SIGXCPU ends by SIGKILL a second later, TO too.
	rep, err = s.Run(isolate.SessionCommand{Args: []string{"sh", "-c", "trap '' XCPU; while :; do :; done"}, CPUTime: time.Second, WallTime: 60 * time.Second}, isolate.IO{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != api.StatusTO || rep.Limit != api.LimitCPU || rep.Signal != int(syscall.SIGKILL) || rep.WallTime >= 60 {
		t.Errorf("ignoring SIGXCPU: %s (%s) limit %q, signal %d, cpu %.2fs: want TO, limit cpu, SIGKILL", rep.Status, rep.Message, rep.Limit, rep.Signal, rep.CPUTime)
	}
	if rep := runIn(t, s, "true"); rep.Status != api.StatusOK {
		t.Errorf("the session after: %s %s", rep.Status, rep.Message)
	}
}

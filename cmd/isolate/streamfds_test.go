package main

// A caller's descriptors as a program's standard streams (--stdin
// /dev/stdin, the ioi form's inherited streams) are checked as paths are:
// a regular file, a pipe, a socket, a terminal or a device of the box's
// own, never a directory (from which the program would walk the host's
// tree as the box user) or a file of a kernel interface.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// streamCaller is one way of running isolate: in-process or handed over,
// as root or as a user who is not root.
type streamCaller struct {
	name string
	env  []string
	cred *syscall.Credential
	args []string // before run's own options
}

func TestStreamDescriptorsAreChecked(t *testing.T) {
	needRoot(t)
	svc := ownService(t, "--socket-group", "64124")
	userEnv, _ := rootlessEnv(t)
	callers := []streamCaller{
		{name: "root in-process", env: handoverEnv("")},
		{name: "root handed over", env: handoverEnv(svc.cliSock)},
		{name: "user in-process", env: userEnv, cred: &syscall.Credential{Uid: nobody, Gid: nobody}, args: []string{"--allow-rlimit-only"}},
		{name: "member handed over", env: handoverEnv(svc.cliSock), cred: member(memberUID)},
	}
	dir := shareDir(t)
	file := filepath.Join(dir, "in")
	os.WriteFile(file, []byte("from a file\n"), 0o644)
	open := func(p string) *os.File {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	refused := []struct {
		what string
		f    *os.File
	}{
		{"a directory", open(dir)},
		{"the host's /proc", open("/proc")},
		{"a file of procfs", open("/proc/self/status")},
		{"a file of sysfs", open("/sys/kernel/uevent_seqnum")},
		{"a device that is not a terminal", open("/dev/kmsg")},
	}
	for _, c := range callers {
		run := func(stdin *os.File, stdinName string, prog ...string) result {
			args := append([]string{"run"}, c.args...)
			args = append(append(args, "--stdin", stdinName, "--"), prog...)
			cmd := exec.Command(isolateBin, args...)
			cmd.Env, cmd.Dir, cmd.Stdin = c.env, "/", stdin
			if c.cred != nil {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
			}
			return runResult(t, cmd)
		}
		if res := run(open(file), "/dev/stdin", "/bin/cat"); res.Code != 0 || res.Stdout != "from a file\n" {
			t.Errorf("%s: a regular file as /dev/stdin: exit %d, stdout %q, stderr %q", c.name, res.Code, res.Stdout, res.Stderr)
		}
		for _, r := range refused {
			for _, name := range []string{"/dev/stdin", "/proc/self/fd/0"} {
				res := run(r.f, name, "/bin/ls", "-a", "/proc/self/fd/0/")
				if res.Code != 2 || !strings.Contains(res.Stderr, "--stdin "+name) || !strings.Contains(res.Stderr, "never a program's stream") || res.Stdout != "" {
					t.Errorf("%s: %s as %s: exit %d, stdout %.200q, stderr %q: want refused (exit 2) naming --stdin", c.name, r.what, name, res.Code, res.Stdout, res.Stderr)
				}
			}
		}
	}
}

// The ioi form passes isolate's own standard input to the program: not a
// directory.
func TestIOIInheritedStdinIsChecked(t *testing.T) {
	ioiBoxRoot(t)
	ioiBox(t, 391)
	dir := shareDir(t)
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cmd := exec.Command(isolateBin, "-b", "391", "--run", "--", "/bin/ls", "-a", "/proc/self/fd/0/")
	cmd.Env, cmd.Stdin = os.Environ(), d
	res := runResult(t, cmd)
	if res.Code != 2 || !strings.Contains(res.Stderr, "is a directory") || strings.Contains(res.Stdout, "..") {
		t.Errorf("a directory as the ioi form's stdin: exit %d, stdout %q, stderr %q: want refused", res.Code, res.Stdout, res.Stderr)
	}
	p := filepath.Join(dir, "in")
	os.WriteFile(p, []byte("ioi\n"), 0o644)
	f, _ := os.Open(p)
	defer f.Close()
	cmd = exec.Command(isolateBin, "-b", "391", "--run", "--", "/bin/cat")
	cmd.Env, cmd.Stdin = os.Environ(), f
	if res := runResult(t, cmd); res.Code != 0 || res.Stdout != "ioi\n" {
		t.Errorf("a file as the ioi form's stdin: exit %d, stdout %q, stderr %q", res.Code, res.Stdout, res.Stderr)
	}
}

// streamsAreChecked: a member's descriptor 0 that is a directory is
// refused as --stdin /dev/stdin, handed over.
func streamsAreChecked(t *testing.T, b *boundary) {
	d, err := os.Open(b.shared)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cmd := exec.Command(isolateBin, "run", "--stdin", "/dev/stdin", "--", "/bin/ls", "/proc/self/fd/0/")
	cmd.Env, cmd.Dir, cmd.Stdin = handoverEnv(b.svc.cliSock), "/", d
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: member(memberUID)}
	if res := runResult(t, cmd); res.Code != 2 || !strings.Contains(res.Stderr, "is a directory") {
		t.Errorf("a member's directory as --stdin /dev/stdin: exit %d, stdout %q, stderr %q: want refused", res.Code, res.Stdout, res.Stderr)
	}
}

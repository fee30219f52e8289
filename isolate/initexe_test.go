package isolate_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/boxinit/initbin"
	"golang.org/x/sys/unix"
)

// A process built with the small init (this test binary, a long-running
// one, with the initbin tag) starts every box's init from it, a sealed
// memfd, not from its own executable; the runs report what runs of an
// init re-executed from the test binary report.
func TestBoxesStartTheSmallInit(t *testing.T) {
	needRoot(t)
	if initbin.Binary() == nil {
		t.Skip("built without the initbin tag: boxes start from /proc/self/exe")
	}
	checkNothingLeft(t)
	h := pooledHost(t, isolate.PoolConfig{Max: 1})
	awaitReady(t, h)
	checkInits := func() {
		t.Helper()
		kids := children()
		if len(kids) == 0 {
			t.Fatal("a box is ready, yet this process has no child (its init)")
		}
		for _, pid := range kids {
			exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(exe, "/memfd:isolate-init") {
				t.Fatalf("init %d runs %s, not the small init", pid, exe)
			}
		}
	}
	checkInits()
	h.StopPool() // (nothing may start an init while the test swaps it below)

	plain := newHost(t)
	specs := []api.Spec{
		{Args: []string{"/bin/sh", "-c", "cat; echo err >&2; exit 3"}},
		{Args: []string{"/no/such/program"}},
		{Args: []string{"/bin/sh", "-c", "kill -SEGV $$"}},
		{Args: []string{"/bin/sh", "-c", "while :; do :; done"}, CPUTimeMs: 100},
	}
	run := func(spec api.Spec) *api.Report {
		rep, err := plain.Run(context.Background(), &spec, isolate.IO{Stdin: strings.NewReader("in\n")})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	var small []*api.Report
	for _, spec := range specs {
		small = append(small, run(spec))
	}
	// Whatever descriptors init is handed: syscall.ForkExec moves them
	// onto 0, 1, 2... in the child, its temporaries just above the highest
	// (a busy service's can be any number). Stdin at each free number up
	// to 200 puts those temporaries everywhere a memfd could be.
	for fd := 3; fd <= 200; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
			continue // taken
		}
		if err := unix.Dup3(0, fd, unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		stdin := os.NewFile(uintptr(fd), "stdin")
		rep, err := plain.Run(context.Background(), &api.Spec{Args: []string{"/bin/true"}}, isolate.IO{Stdin: stdin})
		stdin.Close()
		if err != nil || rep.Status != api.StatusOK {
			t.Fatalf("stdin at descriptor %d: %v %+v", fd, err, rep)
		}
		if n := isolate.SmallInitRefused(); n > 0 {
			t.Fatalf("stdin at descriptor %d: %d inits fell back to /proc/self/exe", fd, n)
		}
	}
	isolate.StartInitFromSelf(t)
	for i, spec := range specs {
		got, want := small[i], run(spec)
		if got.Status != want.Status || got.ExitCode != want.ExitCode || got.Signal != want.Signal || got.Limit != want.Limit ||
			got.Stdout != want.Stdout || got.Stderr != want.Stderr || got.Message != want.Message {
			t.Errorf("%v: small init %s exit %d sig %d limit %q out %q err %q msg %q\nself-exec'd %s exit %d sig %d limit %q out %q err %q msg %q",
				spec.Args, got.Status, got.ExitCode, got.Signal, got.Limit, got.Stdout, got.Stderr, got.Message,
				want.Status, want.ExitCode, want.Signal, want.Limit, want.Stdout, want.Stderr, want.Message)
		}
	}
}

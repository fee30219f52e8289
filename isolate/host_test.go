package isolate_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

func TestMain(m *testing.M) {
	boxinit.MaybeInit() // the boxes' init is this binary
	os.Exit(m.Run())
}

func newHost(t *testing.T) *isolate.Host {
	t.Helper()
	h, err := isolate.NewHost(&isolate.Config{BoxRoot: isolate.DefaultBoxRoot, NumBoxes: isolate.DefaultNumBoxes})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: boxes need namespaces, cgroups and mounts")
	}
}

// Bad requests are typed errors, found before anything is created (no
// root needed: nothing is).
func TestPrepareRefusesBadRequests(t *testing.T) {
	h := newHost(t)
	cases := []struct {
		spec  api.Spec
		field string
	}{
		{api.Spec{}, "args"},
		{api.Spec{Args: []string{"/bin/true"}, MemoryBytes: -5}, "memory_bytes"},
		{api.Spec{Args: []string{"/bin/true"}, Image: "/no/such/image"}, "image"},
		{api.Spec{Args: []string{"/bin/true"}, Lang: "no-such-language"}, "lang"},
		{api.Spec{Args: []string{"/bin/true"}, Seccomp: "/no/such/profile.json"}, "seccomp"},
		{api.Spec{Args: []string{"/bin/true"}, Binds: []api.Bind{{Host: "/no/such/dir", Box: "/x"}}}, "binds[0].host"},
		{api.Spec{Args: []string{"/bin/true"}, CopyIn: []api.Copy{{From: "/etc/hostname", To: "/box/a"}, {From: "/no/such", To: "/box/b"}}}, "copy_in[1].from"},
	}
	for _, c := range cases {
		_, err := h.Prepare(&c.spec)
		var fe *api.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want a FieldError on %s", c.spec, err, c.field)
		}
	}
}

// Standard streams follow os/exec's rule: a Reader is piped in, a
// Writer is captured and copied live, an *os.File is the program's own.
func TestRunStdio(t *testing.T) {
	needRoot(t)
	errFile, err := os.Create(filepath.Join(t.TempDir(), "err"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	var live bytes.Buffer
	spec := &api.Spec{Args: []string{"/bin/sh", "-c", "cat; echo to-stderr >&2"}}
	rep, err := newHost(t).Run(context.Background(), spec, isolate.IO{Stdin: strings.NewReader("from a reader"), Stdout: &live, Stderr: errFile})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != api.StatusOK || rep.Stdout != "from a reader" || live.String() != "from a reader" || rep.Stderr != "" {
		t.Errorf("report %s %q stdout %q stderr %q, live %q", rep.Status, rep.Message, rep.Stdout, rep.Stderr, live.String())
	}
	if data, _ := os.ReadFile(errFile.Name()); string(data) != "to-stderr\n" {
		t.Errorf("stderr file holds %q", data)
	}
}

// cancelOnWrite ends the run's context when the program first writes.
type cancelOnWrite struct {
	cancel context.CancelCauseFunc
	cause  error
}

func (c *cancelOnWrite) Write(p []byte) (int, error) {
	c.cancel(c.cause)
	return len(p), nil
}

// Cancelling the context kills the program; the report is XX and says
// why, with the cause for errors.Is. Here the program's first output
// cancels the run: it is killed and accounted for, however soon after its
// start the cancellation came (the supervisor may not have seen init's
// "started" yet).
func TestRunCancelled(t *testing.T) {
	needRoot(t)
	h := newHost(t)
	for i := 0; i < 10; i++ {
		ctx, cancel := context.WithCancelCause(context.Background())
		cause := errors.New("the caller gave up")
		spec := &api.Spec{Args: []string{"/bin/sh", "-c", "echo started; exec sleep 600"}}
		rep, err := h.Run(ctx, spec, isolate.IO{Stdout: &cancelOnWrite{cancel, cause}})
		cancel(nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Status != api.StatusXX || rep.Message != "interrupted: the caller gave up" || !errors.Is(rep.Cause, cause) {
			t.Errorf("report %s %q cause %v", rep.Status, rep.Message, rep.Cause)
		}
		if rep.Signal != int(syscall.SIGKILL) || rep.Stdout != "started\n" {
			t.Errorf("run %d: the program was not accounted for: signal %d, stdout %q", i, rep.Signal, rep.Stdout)
		}
	}
}

// One host runs many boxes at once, each on its own locked thread.
func TestRunConcurrently(t *testing.T) {
	needRoot(t)
	h := newHost(t)
	var wg sync.WaitGroup
	reports := make([]*api.Report, 8)
	for i := range reports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := h.Run(context.Background(), &api.Spec{Args: []string{"/bin/echo", "hi"}}, isolate.IO{})
			if err != nil {
				t.Error(err)
				return
			}
			reports[i] = rep
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, rep := range reports {
		if rep == nil {
			continue
		}
		if rep.Status != api.StatusOK || rep.Stdout != "hi\n" || seen[rep.BoxID] {
			t.Errorf("report %s %q stdout %q box %d", rep.Status, rep.Message, rep.Stdout, rep.BoxID)
		}
		seen[rep.BoxID] = true
	}
}

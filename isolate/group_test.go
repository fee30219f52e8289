package isolate_test

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
)

// pipeRunner runs "echo WORDS" (to stdout), "cat" (stdin to stdout) and
// "fail" (no run at all) on the host: the group's own logic, without
// root.
type pipeRunner struct{}

func (pipeRunner) Run(ctx context.Context, spec *api.Spec, stdio isolate.IO) (*api.Report, error) {
	rep := &api.Report{Status: api.StatusOK}
	var out string
	switch spec.Args[0] {
	case "echo":
		out = strings.Join(spec.Args[1:], " ") + "\n"
	case "cat":
		b, err := io.ReadAll(stdio.Stdin)
		if err != nil {
			return nil, err
		}
		out = string(b)
	default:
		return nil, &api.FieldError{Field: "args", Msg: "no such word"}
	}
	if stdio.Stdout != nil {
		io.WriteString(stdio.Stdout, out)
	} else {
		rep.Stdout = out
	}
	return rep, nil
}

// Two commands joined by a recorded pipe: the reader gets everything and
// its end of file, the recording keeps its first bytes, each report
// comes as its command ends.
func TestRunGroupPipes(t *testing.T) {
	cmds := []isolate.GroupCommand{
		{Spec: &api.Spec{Args: []string{"echo", "through", "the", "pipe"}}},
		{Spec: &api.Spec{Args: []string{"cat"}}},
	}
	pipes := []isolate.GroupPipe{{From: isolate.GroupEnd{Cmd: 0, FD: 1}, To: isolate.GroupEnd{Cmd: 1, FD: 0}, RecordLimit: 7}}
	var done []int
	reps, recs, err := isolate.RunGroup(context.Background(), pipeRunner{}, cmds, pipes, func(i int, _ *api.Report) { done = append(done, i) })
	if err != nil {
		t.Fatal(err)
	}
	if reps[1].Stdout != "through the pipe\n" || reps[0].Stdout != "" {
		t.Errorf("reports: %q %q", reps[0].Stdout, reps[1].Stdout)
	}
	if len(recs) != 1 || recs[0].Data != "through" || !recs[0].Truncated || recs[0].Pipe != 0 {
		t.Errorf("recording: %+v", recs)
	}
	if len(done) != 2 {
		t.Errorf("reports given as commands ended: %v", done)
	}
}

// A command that cannot run is the group's error, naming its index; its
// files are closed.
func TestRunGroupError(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	cmds := []isolate.GroupCommand{
		{Spec: &api.Spec{Args: []string{"echo", "fine"}}},
		{Spec: &api.Spec{Args: []string{"nosuchword"}}, Close: []*os.File{f}},
	}
	_, _, err = isolate.RunGroup(context.Background(), pipeRunner{}, cmds, nil, nil)
	var ge *isolate.GroupError
	var fe *api.FieldError
	if !errors.As(err, &ge) || ge.Cmd != 1 || !errors.As(err, &fe) || fe.Field != "args" {
		t.Fatalf("error %v", err)
	}
	if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the command's own file is open: %v", err)
	}
}

package isolate

// A group: commands run together, each in a box of its own, their
// standard streams joined by pipes (an interactive task: a program and
// its checker). Front ends give each command's spec and data (IO); the
// group makes the pipes, records what passes where asked, and closes
// each command's ends when it ends, so that its peer sees end of file.

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/isolate-sandbox/isolate/internal/headtail"

	"github.com/isolate-sandbox/isolate/api"
)

// Runner runs one command: a Host, or a front end's stand-in in tests.
type Runner interface {
	Run(ctx context.Context, spec *api.Spec, stdio IO) (*api.Report, error)
}

// GroupCommand is one command of a group. Its IO's streams that a pipe
// names are set by the group.
type GroupCommand struct {
	Spec *api.Spec
	IO   IO
	// Close are the command's own files (a store's file as its stdin),
	// closed when it ends.
	Close []*os.File
}

// GroupEnd is a descriptor of a command: 0, 1 or 2.
type GroupEnd struct{ Cmd, FD int }

// GroupPipe joins From (fd 1 or 2) to To (fd 0); RecordLimit > 0 keeps up
// to that many bytes of what passes.
type GroupPipe struct {
	From, To    GroupEnd
	RecordLimit int64
}

// PipeRecord is what a recorded pipe carried, cut at its limit.
type PipeRecord struct {
	Pipe      int // its index among the group's pipes
	Data      string
	Truncated bool
}

// GroupError is a command's failure to run (not its program's): Cmd is
// its index.
type GroupError struct {
	Cmd int
	Err error
}

func (e *GroupError) Error() string { return fmt.Sprintf("command %d: %v", e.Cmd, e.Err) }
func (e *GroupError) Unwrap() error { return e.Err }

// RunGroup runs cmds at once on r, joined by pipes, and returns their
// reports (in order) and the recorded pipes. done, if set, is called with
// each report as its command ends. A command that could not run makes the
// group's error a *GroupError (the first by index); the others still run
// to their end.
func RunGroup(ctx context.Context, r Runner, cmds []GroupCommand, pipes []GroupPipe, done func(i int, rep *api.Report)) ([]*api.Report, []PipeRecord, error) {
	own := make([][]*os.File, len(cmds))
	for i := range cmds {
		own[i] = append(own[i], cmds[i].Close...)
	}
	defer func() {
		for _, files := range own {
			closeAll(files)
		}
	}()
	var copiers sync.WaitGroup
	recs := make([]*recorder, len(pipes))
	for i, p := range pipes {
		rd, wr, err := os.Pipe()
		if err != nil {
			return nil, nil, err
		}
		own[p.From.Cmd] = append(own[p.From.Cmd], wr)
		if p.From.FD == 2 {
			cmds[p.From.Cmd].IO.Stderr = wr
		} else {
			cmds[p.From.Cmd].IO.Stdout = wr
		}
		if p.RecordLimit > 0 {
			// Two pipes and a copier that keeps what passes between them.
			rd2, wr2, err := os.Pipe()
			if err != nil {
				rd.Close()
				return nil, nil, err
			}
			rec := newRecorder(p.RecordLimit)
			recs[i] = rec
			copiers.Add(1)
			go func(from, to *os.File) {
				defer copiers.Done()
				rec.copy(to, from)
			}(rd, wr2)
			rd = rd2
		}
		own[p.To.Cmd] = append(own[p.To.Cmd], rd)
		cmds[p.To.Cmd].IO.Stdin = rd
	}
	reports := make([]*api.Report, len(cmds))
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	for i := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := r.Run(ctx, cmds[i].Spec, cmds[i].IO)
			// The command's ends of its pipes close with it, so that its
			// peer sees end of file (or a broken pipe).
			closeAll(own[i])
			own[i] = nil
			reports[i], errs[i] = rep, err
			if err == nil && done != nil {
				done(i, rep)
			}
		}()
	}
	wg.Wait()
	copiers.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, nil, &GroupError{Cmd: i, Err: err}
		}
	}
	var records []PipeRecord
	for i, rec := range recs {
		if rec != nil {
			data, trunc := rec.result()
			records = append(records, PipeRecord{Pipe: i, Data: data, Truncated: trunc})
		}
	}
	return reports, records, nil
}

// recorder copies a pipe's traffic and keeps its first limit bytes, as
// a capture keeps a stream's.
type recorder struct {
	mu   sync.Mutex
	kept headtail.Buffer
}

func newRecorder(limit int64) *recorder { return &recorder{kept: headtail.Buffer{Limit: limit}} }

// copy moves bytes from r to w until r ends or w breaks, then closes
// both, so that each side sees what it would on a direct pipe.
func (rec *recorder) copy(w, r *os.File) {
	defer r.Close()
	defer w.Close()
	b := make([]byte, 32<<10)
	for {
		n, err := r.Read(b)
		if n > 0 {
			rec.mu.Lock()
			rec.kept.Keep(b[:n])
			rec.mu.Unlock()
			if _, werr := w.Write(b[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// result is what was kept, once the copier is done: the string shares
// the bytes, written no more.
func (rec *recorder) result() (string, bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.kept.Kept()
}

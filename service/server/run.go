package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/service/caller"
	"github.com/isolate-sandbox/isolate/service/filestore"
)

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	var req RunRequest
	leave, ok := read(s, w, r, &req)
	if !ok {
		return
	}
	defer leave()
	who := callerOf(r)
	asked := make([]*api.Spec, len(req.Commands))
	for i := range req.Commands {
		asked[i] = &req.Commands[i].Spec
	}
	noteOf(r.Context()).ask(asked...)
	if err := s.validate(&req, who); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	held, ok := s.holdOutput(w, who, s.runOutputHeld(&req))
	if !ok {
		return
	}
	defer held.Release() // once the answer is written
	if !s.startRuns(w, who, len(req.Commands)) {
		return
	}
	ctx, slots, ok := s.admit(w, r, len(req.Commands))
	if !ok {
		return
	}
	defer slots.done()

	ctx, ev, end := s.stream(ctx, w, r)
	defer end()
	resp, err := s.run(ctx, &req, who, ev, held)
	// Ran: the answer is all the request still holds.
	slots.ran()
	if resp != nil {
		held.Shrink(answerKept(&req, resp))
	}
	req.dropInputs()
	leave()
	if err != nil {
		if ev != nil && ev.started() {
			ev.fail(err)
			return
		}
		writeError(w, statusOf(err), err)
		return
	}
	if ev != nil {
		ev.finish(resp)
		return
	}
	s.answer(w, http.StatusOK, resp)
}

// task is one request being turned into a group (isolate.RunGroup): its
// commands' streams and files as data, the store files it opened, and
// the results it fills.
type task struct {
	s    *Server
	req  *RunRequest
	who  caller.Caller // whose files of the store it may read, and whose it makes
	ev   *events
	held *caller.Hold // what the service keeps for the request's answer
	io   []isolate.IO
	outs [][]CopyOutResult // per command: its copied-out files
	own  [][]*os.File      // per command: files to close when its run ends
	// inline is what the answer may still hold of copied-out files and
	// recorded pipes, together (maxInlineBytes to begin with).
	inlineMu sync.Mutex
	inline   int64
}

// takeInline reserves up to n bytes of the answer's inline budget.
func (t *task) takeInline(n int64) int64 {
	t.inlineMu.Lock()
	defer t.inlineMu.Unlock()
	n = max(min(n, t.inline), 0)
	t.inline -= n
	return n
}

// run runs every command of req together, as one group, and returns
// their results.
func (s *Server) run(ctx context.Context, req *RunRequest, who caller.Caller, ev *events, held *caller.Hold) (*RunResponse, error) {
	t := &task{s: s, req: req, who: who, ev: ev, held: held, io: make([]isolate.IO, len(req.Commands)), outs: make([][]CopyOutResult, len(req.Commands)), own: make([][]*os.File, len(req.Commands)), inline: maxInlineBytes}
	defer t.cleanup()
	if err := t.prepare(); err != nil {
		return nil, err
	}
	cmds := make([]isolate.GroupCommand, len(req.Commands))
	for i := range req.Commands {
		cmds[i] = isolate.GroupCommand{Spec: &req.Commands[i].Spec, IO: t.io[i], Close: t.own[i]}
		t.own[i] = nil // (the group closes them)
	}
	pipes := make([]isolate.GroupPipe, len(req.Pipes))
	for i, p := range req.Pipes {
		// What the answer holds inline is bounded in all.
		pipes[i] = isolate.GroupPipe{From: isolate.GroupEnd(p.From), To: isolate.GroupEnd(p.To), RecordLimit: t.takeInline(p.RecordMaxBytes)}
	}
	results := make([]Result, len(req.Commands))
	note := noteOf(ctx)
	_, records, err := isolate.RunGroup(ctx, s.runner, cmds, pipes, func(i int, rep *api.Report) {
		rep.RequestID = note.id
		note.settle(i, &req.Commands[i].Spec, rep)
		s.ledger.ChargeCPU(who, CPUOf(rep))
		results[i] = t.result(i, rep)
		if ev != nil {
			ev.result(i, results[i])
		}
	})
	var ge *isolate.GroupError
	var fe *api.FieldError
	if errors.As(err, &ge) && errors.As(ge.Err, &fe) {
		return nil, fe.In(fmt.Sprintf("commands[%d]", ge.Cmd)) // the request's own path
	} else if errors.As(err, &ge) {
		return nil, ge.Err
	} else if err != nil {
		return nil, err
	}
	resp := &RunResponse{Results: results}
	for _, r := range records {
		resp.Pipes = append(resp.Pipes, PipeRecording{Index: r.Pipe, Data: r.Data, Truncated: r.Truncated})
	}
	return resp, nil
}

// prepare gives each command its streams and files.
func (t *task) prepare() error {
	for i := range t.req.Commands {
		c := &t.req.Commands[i]
		if err := t.stdin(i, c); err != nil {
			return err
		}
		// Collected streams are cut per stream below; the runner keeps
		// the larger of the two.
		limit := c.Spec.WithDefaults().OutputLimitBytes
		want := int64(0)
		for j, o := range []*Output{c.Stdout, c.Stderr} {
			switch {
			case o == nil || o.Pipe:
				want = max(want, limit)
			case o.Collect.MaxBytes > t.s.maxOutput():
				return &api.FieldError{Field: fmt.Sprintf("commands[%d].%s.collect.max_bytes", i, []string{"stdout", "stderr"}[j]),
					Msg: fmt.Sprintf("%d is beyond this service's maximum %d", o.Collect.MaxBytes, t.s.maxOutput())}
			case o.Collect.MaxBytes > 0:
				want = max(want, o.Collect.MaxBytes)
			default:
				want = max(want, limit)
			}
		}
		if want != limit {
			c.Spec.OutputLimitBytes = want
		}
		if t.ev != nil {
			t.io[i].Stdout = t.ev.writer(i, "stdout")
			t.io[i].Stderr = t.ev.writer(i, "stderr")
		}
		if err := t.copyIn(i, c); err != nil {
			return err
		}
		if err := t.copyOutPlan(i, c); err != nil {
			return err
		}
	}
	return nil
}

func (t *task) stdin(i int, c *Command) error {
	in := c.Stdin
	switch {
	case in == nil || in.Pipe:
		return nil
	case in.Text != nil:
		t.io[i].Stdin = strings.NewReader(*in.Text)
	case in.Base64 != nil:
		t.io[i].Stdin = bytes.NewReader(*in.Base64)
	default:
		f, _, err := t.s.store.Open(in.File, t.who.MayUseStore)
		if err != nil {
			return storeErr(fmt.Sprintf("commands[%d].stdin.file", i), err)
		}
		t.own[i] = append(t.own[i], f)
		t.io[i].Stdin = f
	}
	return nil
}

func storeErr(field string, err error) error {
	if errors.Is(err, filestore.ErrNotFound) {
		return &api.FieldError{Field: field, Msg: "no such file in the store (expired or deleted?)"}
	}
	return err
}

// copyIn gives each copy_in's content to the runtime as data: the text
// or bytes of the request, or the store's file, written into the box as
// the box user's.
func (t *task) copyIn(i int, c *Command) error {
	for j, ci := range c.CopyIn {
		cp := isolate.Copy{To: ci.Path, Mode: os.FileMode(ci.Mode)}
		switch {
		case ci.Text != nil:
			cp.Content = strings.NewReader(*ci.Text)
		case ci.Base64 != nil:
			cp.Content = bytes.NewReader(*ci.Base64)
		default:
			f, _, err := t.s.store.Open(ci.File, t.who.MayUseStore)
			if err != nil {
				return storeErr(fmt.Sprintf("commands[%d].copy_in[%d].file", i, j), err)
			}
			t.own[i] = append(t.own[i], f)
			cp.Content = f
		}
		t.io[i].CopyIn = append(t.io[i].CopyIn, cp)
	}
	return nil
}

// copyOutPlan takes each copy_out file from the runtime as data, into
// the command's result: inline up to its bound, or into the store.
func (t *task) copyOutPlan(i int, c *Command) error {
	t.outs[i] = make([]CopyOutResult, len(c.CopyOut))
	for j, co := range c.CopyOut {
		res := &t.outs[i][j]
		*res = CopyOutResult{Path: co.Path, Error: "not copied out (absent from the box, or not a regular file)"}
		// (A file the store cannot take is the result's error, not the
		// command's: the runtime copied it out.)
		t.io[i].CopyOut = append(t.io[i].CopyOut, isolate.Copy{From: co.Path, Sink: func(f *os.File, size int64) error {
			*res = t.takeOut(f, size, co)
			return nil
		}})
	}
	return nil
}

// result is command i's report with its streams cut as asked and its
// copied-out files.
func (t *task) result(i int, rep *api.Report) Result {
	c := &t.req.Commands[i]
	res := Result{Report: rep}
	rep.Sandbox.Via = "service"
	cut := func(o *Output, s *string, trunc *bool) {
		if o != nil && o.Collect != nil && o.Collect.MaxBytes > 0 && int64(len(*s)) > o.Collect.MaxBytes {
			*s = (*s)[:o.Collect.MaxBytes]
			*trunc = true
		}
	}
	cut(c.Stdout, &rep.Stdout, &rep.StdoutTruncated)
	cut(c.Stderr, &rep.Stderr, &rep.StderrTruncated)
	if len(c.CopyOut) > 0 {
		res.CopyOut = t.outs[i]
	}
	return res
}

// takeOut takes a copied-out file, open and of size bytes: inline up to
// its limit, or into the file store.
func (t *task) takeOut(f *os.File, size int64, co CopyOut) CopyOutResult {
	res := CopyOutResult{Path: co.Path}
	res.Size = size
	if fi, err := f.Stat(); err == nil {
		res.Mode = uint32(fi.Mode().Perm())
	}
	if co.Store {
		info, err := t.s.store.Put(t.who.StoreOwner(), f, 0)
		if err != nil {
			res.Error = err.Error()
			return res
		}
		res.File = info.ID
		return res
	}
	limit := co.InlineMaxBytes
	if limit == 0 {
		limit = api.DefaultOutputLimitBytes
	}
	// What the answer holds inline is bounded in all, whatever each
	// copy-out asks, and held for the caller.
	inline := t.takeInline(min(limit, res.Size))
	if err := t.held.Grow(inline); err != nil {
		res.Error = "not copied out inline: " + err.Error()
		return res
	}
	data := make([]byte, inline)
	n, err := io.ReadFull(f, data)
	if err == io.ErrUnexpectedEOF {
		err = nil // the file shrank meanwhile
	}
	data = data[:n]
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Truncated = int64(len(data)) < res.Size
	if utf8.Valid(data) {
		s := unsafe.String(unsafe.SliceData(data), len(data)) // data is written no more: no second copy
		res.Text = &s
	} else {
		res.Base64 = data
	}
	return res
}

func (t *task) cleanup() {
	for i := range t.own {
		closeAll(t.own[i])
	}
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

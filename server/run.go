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
	"github.com/isolate-sandbox/isolate/caller"
	"github.com/isolate-sandbox/isolate/filestore"
	"github.com/isolate-sandbox/isolate/isolate"
)

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	var req RunRequest
	leave, ok := read(s, w, r, &req)
	if !ok {
		return
	}
	defer leave()
	who := callerOf(r)
	if err := s.validate(&req, who); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	ctx, done, ok := s.admit(w, r, len(req.Commands))
	if !ok {
		return
	}
	defer done()

	ctx, ev, end := s.stream(ctx, w, r)
	defer end(nil)
	resp, err := s.run(ctx, &req, who, ev)
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

// task is one request being run: its commands' streams, the pipes
// between them, and the host files it made.
type task struct {
	s    *Server
	req  *RunRequest
	who  caller.Caller // whose files of the store it may read, and whose it makes
	ev   *events
	io   []isolate.IO
	outs [][]CopyOutResult // per command: its copied-out files
	own  [][]*os.File      // per command: files to close when its run ends
	recs []*recorder       // per pipe: the recorded traffic, or nil
	wg   sync.WaitGroup
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

// run runs every command of req together and returns their results.
func (s *Server) run(ctx context.Context, req *RunRequest, who caller.Caller, ev *events) (*RunResponse, error) {
	t := &task{s: s, req: req, who: who, ev: ev, io: make([]isolate.IO, len(req.Commands)), outs: make([][]CopyOutResult, len(req.Commands)), own: make([][]*os.File, len(req.Commands)), inline: maxInlineBytes}
	defer t.cleanup()
	if err := t.prepare(); err != nil {
		return nil, err
	}
	results := make([]Result, len(req.Commands))
	errs := make([]error, len(req.Commands))
	var wg sync.WaitGroup
	for i := range req.Commands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := req.Commands[i].Spec
			rep, err := s.runner.Run(ctx, &spec, t.io[i])
			// The command's ends of its pipes close with it, so that
			// its peer sees end of file (or a broken pipe).
			closeAll(t.own[i])
			t.own[i] = nil
			var fe *api.FieldError
			if errors.As(err, &fe) {
				err = fe.In(fmt.Sprintf("commands[%d]", i)) // the request's own path
			}
			if errs[i] = err; err == nil {
				results[i] = t.result(i, rep)
				if ev != nil {
					ev.result(i, results[i])
				}
			}
		}()
	}
	wg.Wait()
	t.wg.Wait() // the pipes' copiers
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	resp := &RunResponse{Results: results}
	for i, rec := range t.recs {
		if rec != nil {
			data, trunc := rec.result()
			resp.Pipes = append(resp.Pipes, PipeRecording{Index: i, Data: data, Truncated: trunc})
		}
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
	return t.pipes()
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

// pipes makes a real pipe for each entry of req.Pipes: the writer's end
// goes to one box, the reader's to the other. A recorded pipe is two
// pipes with a copier between them that keeps what passes.
func (t *task) pipes() error {
	t.recs = make([]*recorder, len(t.req.Pipes))
	for i, p := range t.req.Pipes {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		t.own[p.From.Cmd] = append(t.own[p.From.Cmd], w)
		t.setOut(p.From, w)
		if p.RecordMaxBytes > 0 {
			r2, w2, err := os.Pipe()
			if err != nil {
				r.Close()
				return err
			}
			rec := &recorder{limit: t.takeInline(p.RecordMaxBytes)}
			t.recs[i] = rec
			t.wg.Add(1)
			go func(from, to *os.File) {
				defer t.wg.Done()
				rec.copy(to, from)
			}(r, w2)
			r = r2
		}
		t.own[p.To.Cmd] = append(t.own[p.To.Cmd], r)
		t.io[p.To.Cmd].Stdin = r
	}
	return nil
}

func (t *task) setOut(e End, f *os.File) {
	if e.FD == 1 {
		t.io[e.Cmd].Stdout = f
	} else {
		t.io[e.Cmd].Stderr = f
	}
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
	// copy-out asks.
	data := make([]byte, t.takeInline(min(limit, res.Size)))
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

// recorder copies a pipe's traffic and keeps its first limit bytes.
type recorder struct {
	limit int64
	mu    sync.Mutex
	buf   []byte
	trunc bool
}

// copy moves bytes from r to w until r ends or w breaks, then closes
// both, so that each side sees what it would on a direct pipe.
func (rec *recorder) copy(w, r *os.File) {
	defer r.Close()
	defer w.Close()
	b := make([]byte, 32<<10)
	for {
		n, err := r.Read(b)
		if n > 0 {
			rec.keep(b[:n])
			if _, werr := w.Write(b[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (rec *recorder) keep(p []byte) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	room := rec.limit - int64(len(rec.buf))
	if int64(len(p)) > room {
		p = p[:room]
		rec.trunc = true
	}
	// Grown as append would, but never past the limit.
	if need := len(rec.buf) + len(p); need > cap(rec.buf) {
		grown := make([]byte, len(rec.buf), min(max(2*cap(rec.buf), need, 4<<10), int(rec.limit)))
		copy(grown, rec.buf)
		rec.buf = grown
	}
	rec.buf = append(rec.buf, p...)
}

// result is what was kept, once the copier is done: the string shares
// the bytes, written no more.
func (rec *recorder) result() (string, bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return unsafe.String(unsafe.SliceData(rec.buf), len(rec.buf)), rec.trunc
}

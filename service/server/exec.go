package server

import (
	"bytes"
	"errors"
	"net/http"
	"strings"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/langs/judge"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// POST /v1/exec: compile and run one source file; the answer is `isolate
// exec`'s report (CE included), or its events when streamed.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Exec == nil {
		writeError(w, http.StatusNotImplemented, errors.New("this service has no compile+run (exec) support"))
		return
	}
	var req ExecRequest
	leave, ok := read(s, w, r, &req)
	if !ok {
		return
	}
	defer leave()
	who := callerOf(r)
	note := noteOf(r.Context())
	note.ask(&req.Spec)
	if err := s.validateExec(&req, who); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if who.Capped() {
		req.Caps = &s.cfg.Policy.Caps
	}
	runLimit := req.Spec.WithDefaults().OutputLimitBytes
	held, ok := s.holdOutput(w, who, OneCommandBytes(runLimit))
	if !ok {
		return
	}
	defer held.Release() // once the answer is written
	if !s.startRuns(w, who, 1) {
		return
	}
	ctx, slots, ok := s.admit(w, r, 1)
	if !ok {
		return
	}
	defer slots.done()

	var stdio isolate.IO
	switch in := req.Stdin; {
	case in == nil:
	case in.Text != nil:
		stdio.Stdin = strings.NewReader(*in.Text)
	case in.Base64 != nil:
		stdio.Stdin = bytes.NewReader(*in.Base64)
	default:
		f, _, err := s.store.Open(in.File, who.MayUseStore)
		if err != nil {
			writeError(w, statusOf(storeErr("stdin.file", err)), storeErr("stdin.file", err))
			return
		}
		defer f.Close()
		stdio.Stdin = f
	}
	ctx, ev, end := s.stream(ctx, w, r)
	defer end()
	if ev != nil {
		stdio.Stdout, stdio.Stderr = ev.writer(0, "stdout"), ev.writer(0, "stderr")
	}
	rep, err := s.cfg.Exec.Exec(ctx, &req, stdio)
	// Ran: the answer is all the request still holds.
	slots.ran()
	req.Source, req.Stdin = "", nil
	leave()
	if rep != nil {
		held.Shrink(reportKept(rep.Compile, judge.CompileOutputLimit) + reportKept(rep.Run, runLimit))
	}
	if err == nil {
		for _, phase := range []*api.Report{rep.Compile, rep.Run} {
			if phase != nil {
				phase.Sandbox.Via = "service"
				phase.RequestID = note.id
				s.ledger.ChargeCPU(who, CPUOf(phase))
			}
		}
		note.settleExec(&req.Spec, rep)
	}
	switch {
	case err != nil && ev != nil && ev.started():
		ev.fail(err)
	case err != nil:
		writeError(w, statusOf(err), err)
	case ev != nil:
		ev.emit(Event{Exec: rep, Done: true})
	default:
		s.answer(w, http.StatusOK, rep)
	}
}

func (s *Server) validateExec(req *ExecRequest, who caller.Caller) error {
	if req.Lang == "" {
		return &api.FieldError{Field: "lang", Msg: "no language given"}
	}
	if req.Source == "" {
		return &api.FieldError{Field: "source", Msg: "no source given"}
	}
	if len(req.CopyIn) > 0 || len(req.CopyOut) > 0 {
		return &api.FieldError{Field: "copy_in", Msg: "not supported by exec (use /v1/run)"}
	}
	// Validate wants a program; exec's is the language's.
	spec := req.Spec
	spec.Args = append([]string{"main"}, spec.Args...)
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := s.cfg.Policy.Check(who, &req.Spec, ""); err != nil {
		return err
	}
	return req.Stdin.check("stdin")
}

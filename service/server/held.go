package server

import (
	"fmt"
	"net/http"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate/codecontext"
	"github.com/isolate-sandbox/isolate/langs/judge"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// holdOutput holds in who's account of the ledger what a foreground
// request may make the service keep for it (its commands' captured
// output at its limits), until its answer is written; beyond the
// caller's budget (--max-held-bytes-per-caller, --max-held-bytes) it
// answers 429 with Retry-After itself, before anything runs.
func (s *Server) holdOutput(w http.ResponseWriter, who caller.Caller, bytes int64) (*caller.Hold, bool) {
	// More than the budget itself never fits, however long one waits:
	// a bad request, not a busy service.
	if b := s.ledger.Budget(); b.Bytes > 0 && bytes > b.Bytes || b.TotalBytes > 0 && bytes > b.TotalBytes {
		writeError(w, http.StatusBadRequest, fmt.Errorf("output_limit_bytes: the request's output at its limits (%d bytes) is more than the service holds for one caller (%d, --max-held-bytes-per-caller; %d in all, --max-held-bytes): ask for less output or fewer commands", bytes, b.Bytes, b.TotalBytes))
		return nil, false
	}
	held, err := s.ledger.Hold(who.Account(), caller.Usage{Bytes: bytes})
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, err)
		return nil, false
	}
	return held, true
}

// runOutputHeld is what req's commands may make the service keep of
// their output: each captured stream at its limit (the larger of the
// two, as prepare sets it; a collect beyond the service's maximum is
// prepare's 400), and the pipes' recordings at theirs.
func (s *Server) runOutputHeld(req *RunRequest) int64 {
	var n int64
	for _, c := range req.Commands {
		limit := c.Spec.WithDefaults().OutputLimitBytes
		for _, o := range []*Output{c.Stdout, c.Stderr} {
			if o != nil && o.Collect != nil {
				limit = max(limit, min(o.Collect.MaxBytes, s.maxOutput()))
			}
		}
		streams := int64(2)
		if c.StderrToStdout || c.Stdout != nil && c.Stdout.Pipe {
			streams = 1
		}
		n += streams * limit
	}
	var records int64
	for _, p := range req.Pipes {
		records += p.RecordMaxBytes
	}
	return n + min(records, maxInlineBytes)
}

// reportKept is what a report's captured streams hold once it ended.
func reportKept(rep *api.Report, limit int64) int64 {
	if rep == nil {
		return 0
	}
	return keptCost(len(rep.Stdout), limit) + keptCost(len(rep.Stderr), limit)
}

// answerKept is what a run's answer holds: its captured streams, pipe
// recordings and inline copied-out files.
func answerKept(req *RunRequest, resp *RunResponse) int64 {
	var n int64
	for i, r := range resp.Results {
		n += reportKept(r.Report, req.Commands[i].Spec.WithDefaults().OutputLimitBytes)
		for _, co := range r.CopyOut {
			if co.Text != nil {
				n += int64(len(*co.Text))
			}
			n += int64(len(co.Base64))
		}
	}
	for _, p := range resp.Pipes {
		n += int64(len(p.Data))
	}
	return n
}

// resultsKept is what a code call's rich results hold.
func resultsKept(results []codecontext.Result) int64 {
	var n int
	for _, r := range results {
		n += len(r.Text) + len(r.HTML) + len(r.Markdown) + len(r.SVG) + len(r.PNG) + len(r.JPEG) + len(r.LaTeX) + len(r.JSON)
	}
	return int64(n)
}

// OneCommandBytes is what a command may make the service hold at the
// --max-output cap: its two streams and an exec's compile phase's. A
// caller's budget below it refuses such a command (400), so the default
// budget is at least this. (An inline copy-out past the budget is an
// error of that copy-out, not of the run.)
func OneCommandBytes(maxOutput int64) int64 { return 2*maxOutput + 2*judge.CompileOutputLimit }

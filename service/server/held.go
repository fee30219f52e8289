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
// output at its limits), until its answer is written; if the ledger
// refuses, it answers itself (holdRefused), before anything runs.
func (s *Server) holdOutput(w http.ResponseWriter, who caller.Caller, bytes int64) (*caller.Hold, bool) {
	held, err := s.ledger.Hold(who.Account(), caller.Usage{Bytes: bytes})
	if err != nil {
		holdRefused(w, err)
		return nil, false
	}
	return held, true
}

// holdRefused answers a hold of a request's output the ledger refused:
// one beyond the caller's budget by itself never fits, however long one
// waits, a bad request (400) naming output_limit_bytes; else the caller
// holds too much now (429, Retry-After).
func holdRefused(w http.ResponseWriter, err error) {
	code := statusOf(err)
	switch code {
	case http.StatusBadRequest:
		err = fmt.Errorf("output_limit_bytes: the output it may make the service hold at its limits never fits (%w): ask for less output or fewer commands", err)
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "1")
	}
	writeError(w, code, err)
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
	return streamsKept(len(rep.Stdout), len(rep.Stderr), limit)
}

// streamsKept is what a command's two captured streams hold once it
// ended, stdout and stderr bytes kept, each captured at limit.
func streamsKept(stdout, stderr int, limit int64) int64 {
	return keptCost(stdout, limit) + keptCost(stderr, limit)
}

// keptCost is the memory a kept stream of n bytes holds: its capture's
// buffer, grown by doubling from 4 KiB up to the stream's limit.
func keptCost(n int, limit int64) int64 {
	if n == 0 {
		return 0
	}
	return min(max(2*int64(n), 4<<10), max(limit, int64(n)))
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

// OneCommandBytes is what a command of output limit maxOutput may make
// the service hold: its two streams and an exec's compile phase's. At
// the --max-output cap, a caller's budget below it refuses such a
// command (400), so the default budget is at least this. (An inline
// copy-out past the budget is an error of that copy-out, not of the
// run.)
func OneCommandBytes(maxOutput int64) int64 { return 2*maxOutput + 2*judge.CompileOutputLimit }

package server

import (
	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// RunRequest is the body of POST /v1/run: commands that start together
// and share the wall clock, and pipes between their descriptors (an
// interactive task is one request).
type RunRequest struct {
	Commands []Command `json:"commands"`
	Pipes    []Pipe    `json:"pipes,omitempty"`
}

// dropInputs lets go of the request's inline inputs once its commands
// ran: a client slow to read its answer does not keep them in memory.
func (r *RunRequest) dropInputs() {
	for i := range r.Commands {
		r.Commands[i].Stdin, r.Commands[i].CopyIn = nil, nil
	}
}

// Command is one command of a request: a run spec (api.Spec, every field
// of the CLI's run with its default) plus where its standard streams come
// from and go, and the files copied in and out. The service names no host
// path on a client's behalf: copy_in and copy_out here are inline data or
// file-store ids, and shadow api.Spec's host-path copies.
type Command struct {
	api.Spec
	Stdin   *Input    `json:"stdin,omitempty"`  // absent: /dev/null
	Stdout  *Output   `json:"stdout,omitempty"` // absent: collected up to output_limit_bytes
	Stderr  *Output   `json:"stderr,omitempty"` // absent: collected up to output_limit_bytes
	CopyIn  []CopyIn  `json:"copy_in,omitempty"`
	CopyOut []CopyOut `json:"copy_out,omitempty"`
}

// Input is where a standard input comes from: exactly one field set.
type Input struct {
	Text   *string `json:"text,omitempty"`
	Base64 *[]byte `json:"base64,omitempty"` // encoding/json decodes base64 into []byte
	File   string  `json:"file,omitempty"`   // a file-store id
	Pipe   bool    `json:"pipe,omitempty"`   // the reading end of a pipe in "pipes"
}

// Output is where a standard output or error goes: exactly one field set.
type Output struct {
	Collect *Collect `json:"collect,omitempty"` // into the result, cut at max_bytes
	Pipe    bool     `json:"pipe,omitempty"`    // the writing end of a pipe in "pipes"
}

// Collect keeps the first MaxBytes bytes of a stream in the result (0:
// output_limit_bytes).
type Collect struct {
	MaxBytes int64 `json:"max_bytes"`
}

// CopyIn is a file put into the box before the command starts: its
// content inline (text or base64) or a file-store id.
type CopyIn struct {
	Path   string  `json:"path"` // absolute, inside the box (under /box or /tmp)
	Text   *string `json:"text,omitempty"`
	Base64 *[]byte `json:"base64,omitempty"`
	File   string  `json:"file,omitempty"`
	Mode   uint32  `json:"mode,omitempty"` // permission bits; default 0644
}

// CopyOut is a file taken from the box after the command: inline in the
// result up to InlineMaxBytes, or into the file store.
type CopyOut struct {
	Path           string `json:"path"`
	InlineMaxBytes int64  `json:"inline_max_bytes,omitempty"`
	Store          bool   `json:"store,omitempty"`
}

// Pipe connects a descriptor of one command to one of another: From's
// fd 1 or 2 writes what To's fd 0 reads. RecordMaxBytes > 0 records the
// traffic (up to that many bytes) into the response.
type Pipe struct {
	From           End   `json:"from"`
	To             End   `json:"to"`
	RecordMaxBytes int64 `json:"record_max_bytes,omitempty"`
}

// End is a descriptor of a command.
type End struct {
	Cmd int `json:"cmd"`
	FD  int `json:"fd"`
}

// RunResponse answers POST /v1/run.
type RunResponse struct {
	Results []Result        `json:"results"`
	Pipes   []PipeRecording `json:"pipes,omitempty"`
}

// Result is one command's report, field for field the CLI's, plus its
// copied-out files.
type Result struct {
	*api.Report
	CopyOut []CopyOutResult `json:"copy_out,omitempty"`
}

// CopyOutResult is one copied-out file: inline (Text when it is valid
// UTF-8, else Base64) or a file-store id; Error when it could not be
// stored or read (the store's quota). A file the box lacks fails the
// command (XX), as the CLI's --copy-out does.
type CopyOutResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Mode is the file's permission bits in the box (absent when it was
	// not copied out, or they are 0).
	Mode      uint32  `json:"mode,omitempty"`
	Text      *string `json:"text,omitempty"`
	Base64    []byte  `json:"base64,omitempty"`
	File      string  `json:"file,omitempty"`
	Truncated bool    `json:"truncated,omitempty"`
	Error     string  `json:"error,omitempty"`
}

// PipeRecording is the traffic recorded on pipes[Index].
type PipeRecording struct {
	Index     int    `json:"index"`
	Data      string `json:"data"`
	Truncated bool   `json:"truncated"`
}

// ExecRequest is the body of POST /v1/exec: one source file compiled (if
// the language compiles) and run. The spec's lang names the language,
// its args are the program's arguments, its limits the run's (the
// compile phase has the language's own).
type ExecRequest struct {
	api.Spec
	Source string `json:"source"`
	Stdin  *Input `json:"stdin,omitempty"` // the run's; absent: /dev/null
	// Caps bound the compile phase's limits (the language's) for a
	// caller the service's caps bound; nil: none. Not part of the body.
	Caps *caller.Caps `json:"-"`
}

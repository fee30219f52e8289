package server

import (
	"fmt"
	"path"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// validate checks a run request as a whole: each command's spec, what the
// caller may ask, its streams and files, and the pipes between them.
func (s *Server) validate(req *RunRequest, who caller.Caller) error {
	bad := func(field, format string, a ...any) error {
		return &api.FieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	// decode bounded the commands (maxCommands) as it read them.
	if len(req.Commands) == 0 {
		return bad("commands", "no command given")
	}
	for i := range req.Commands {
		c := &req.Commands[i]
		p := fmt.Sprintf("commands[%d]", i)
		if err := c.Spec.Validate(); err != nil {
			if fe, ok := err.(*api.FieldError); ok {
				return fe.In(p)
			}
			return err
		}
		if err := s.cfg.Policy.Check(who, &c.Spec, p+"."); err != nil {
			return err
		}
		if err := c.Stdin.check(p + ".stdin"); err != nil {
			return err
		}
		if err := c.Stdout.check(p + ".stdout"); err != nil {
			return err
		}
		if err := c.Stderr.check(p + ".stderr"); err != nil {
			return err
		}
		if c.StderrToStdout && c.Stderr != nil {
			return bad(p+".stderr", "set together with stderr_to_stdout")
		}
		for j, ci := range c.CopyIn {
			if err := ci.check(fmt.Sprintf("%s.copy_in[%d]", p, j)); err != nil {
				return err
			}
		}
		for j, co := range c.CopyOut {
			f := fmt.Sprintf("%s.copy_out[%d]", p, j)
			if err := boxFile(f+".path", co.Path); err != nil {
				return err
			}
			if co.InlineMaxBytes < 0 || co.InlineMaxBytes > maxInlineBytes {
				return bad(f+".inline_max_bytes", "%d: must be 0 to %d", co.InlineMaxBytes, maxInlineBytes)
			}
			if co.Store && co.InlineMaxBytes != 0 {
				return bad(f, "inline_max_bytes and store are exclusive")
			}
		}
	}
	return checkPipes(req)
}

// boxFile checks a path inside the box that a file is copied to or from.
func boxFile(field, p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return &api.FieldError{Field: field, Msg: fmt.Sprintf("%q: must be an absolute, clean path inside the box", p)}
	}
	return nil
}

func (in *Input) check(field string) error {
	if in == nil {
		return nil
	}
	set := 0
	for _, b := range []bool{in.Text != nil, in.Base64 != nil, in.File != "", in.Pipe} {
		if b {
			set++
		}
	}
	if set != 1 {
		return &api.FieldError{Field: field, Msg: "expected exactly one of text, base64, file, pipe"}
	}
	return nil
}

func (o *Output) check(field string) error {
	if o == nil {
		return nil
	}
	if (o.Collect != nil) == o.Pipe {
		return &api.FieldError{Field: field, Msg: "expected exactly one of collect, pipe"}
	}
	if o.Collect != nil && (o.Collect.MaxBytes < 0 || o.Collect.MaxBytes > api.MaxSize) {
		return &api.FieldError{Field: field + ".collect.max_bytes", Msg: fmt.Sprintf("%d: must be 0 or more", o.Collect.MaxBytes)}
	}
	return nil
}

func (c *CopyIn) check(field string) error {
	if err := boxFile(field+".path", c.Path); err != nil {
		return err
	}
	set := 0
	for _, b := range []bool{c.Text != nil, c.Base64 != nil, c.File != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		return &api.FieldError{Field: field, Msg: "expected exactly one of text, base64, file"}
	}
	if c.Mode&^0o777 != 0 {
		return &api.FieldError{Field: field + ".mode", Msg: fmt.Sprintf("%o: only permission bits (0 to 0777)", c.Mode)}
	}
	return nil
}

// checkPipes: each pipe joins fd 1 or 2 of one command to fd 0 of
// another, each descriptor is in at most one pipe, and a stream a pipe
// uses is not also given another source or destination.
func checkPipes(req *RunRequest) error {
	used := map[End]bool{}
	for i, p := range req.Pipes {
		f := fmt.Sprintf("pipes[%d]", i)
		for _, e := range []struct {
			name string
			end  End
			fds  []int
		}{{"from", p.From, []int{1, 2}}, {"to", p.To, []int{0}}} {
			if e.end.Cmd < 0 || e.end.Cmd >= len(req.Commands) {
				return &api.FieldError{Field: f + "." + e.name + ".cmd", Msg: fmt.Sprintf("%d: no such command", e.end.Cmd)}
			}
			if !fdIn(e.end.FD, e.fds) {
				return &api.FieldError{Field: f + "." + e.name + ".fd", Msg: fmt.Sprintf("%d: expected %v", e.end.FD, e.fds)}
			}
			if used[e.end] {
				return &api.FieldError{Field: f + "." + e.name, Msg: fmt.Sprintf("command %d's fd %d is in another pipe already", e.end.Cmd, e.end.FD)}
			}
			used[e.end] = true
			c := &req.Commands[e.end.Cmd]
			switch {
			case e.end.FD == 0 && c.Stdin != nil && !c.Stdin.Pipe,
				e.end.FD == 1 && c.Stdout != nil && !c.Stdout.Pipe,
				e.end.FD == 2 && c.Stderr != nil && !c.Stderr.Pipe:
				return &api.FieldError{Field: f + "." + e.name, Msg: fmt.Sprintf("command %d's fd %d has another source or destination", e.end.Cmd, e.end.FD)}
			case e.end.FD == 2 && c.StderrToStdout:
				return &api.FieldError{Field: f + "." + e.name, Msg: fmt.Sprintf("command %d sends stderr to stdout", e.end.Cmd)}
			}
		}
		if p.RecordMaxBytes < 0 || p.RecordMaxBytes > maxInlineBytes {
			return &api.FieldError{Field: f + ".record_max_bytes", Msg: fmt.Sprintf("%d: must be 0 to %d", p.RecordMaxBytes, maxInlineBytes)}
		}
	}
	for i, c := range req.Commands {
		for fd, piped := range map[int]bool{0: c.Stdin != nil && c.Stdin.Pipe, 1: c.Stdout != nil && c.Stdout.Pipe, 2: c.Stderr != nil && c.Stderr.Pipe} {
			if piped && !used[End{Cmd: i, FD: fd}] {
				return &api.FieldError{Field: fmt.Sprintf("commands[%d].%s", i, []string{"stdin", "stdout", "stderr"}[fd]), Msg: "pipe: true, but no pipe in pipes uses it"}
			}
		}
	}
	return nil
}

func fdIn(fd int, fds []int) bool {
	for _, x := range fds {
		if x == fd {
			return true
		}
	}
	return false
}

package server

import (
	"fmt"
	"path"
	"strings"

	"github.com/isolate-sandbox/isolate/api"
)

// Caps are the service's maxima for what a request may ask (0: no cap).
// A request beyond one is a 400 naming the field; a request that leaves
// a capped limit at its default gets the cap when the default is larger
// (or none).
type Caps struct {
	CPUTimeMs        int64
	WallTimeMs       int64
	MemoryBytes      int64
	Pids             int64
	TmpSizeBytes     int64
	FileSizeBytes    int64
	OutputLimitBytes int64
	Commands         int // commands in one request (also bounded by --parallel)
}

// capped lists each capped field: its name, the cap, and the field.
func (c Caps) fields(s *api.Spec) []struct {
	name string
	max  int64
	v    *int64
} {
	return []struct {
		name string
		max  int64
		v    *int64
	}{
		{"cpu_time_ms", c.CPUTimeMs, &s.CPUTimeMs},
		{"wall_time_ms", c.WallTimeMs, &s.WallTimeMs},
		{"memory_bytes", c.MemoryBytes, &s.MemoryBytes},
		{"pids", c.Pids, &s.Pids},
		{"tmp_size_bytes", c.TmpSizeBytes, &s.TmpSizeBytes},
		{"file_size_bytes", c.FileSizeBytes, &s.FileSizeBytes},
		{"output_limit_bytes", c.OutputLimitBytes, &s.OutputLimitBytes},
	}
}

// apply checks s against the caps and sets capped defaults; prefix is the
// spec's path in the request.
func (c Caps) apply(s *api.Spec, prefix string) error {
	withDefaults := s.WithDefaults()
	eff := c.fields(&withDefaults)
	for i, f := range c.fields(s) {
		if f.max <= 0 {
			continue
		}
		v := *eff[i].v
		if v != api.Unlimited && v != 0 && v <= f.max {
			continue
		}
		if *f.v == 0 { // the default is beyond the cap (or none): the cap
			*f.v = f.max
			continue
		}
		shown := fmt.Sprint(v)
		if v == api.Unlimited {
			shown = "unlimited"
		}
		return &api.FieldError{Field: prefix + f.name, Msg: fmt.Sprintf("%s is beyond this service's maximum %d", shown, f.max)}
	}
	return nil
}

// validate checks a run request as a whole: each command's spec, what the
// caller may ask, its streams and files, and the pipes between them.
func (s *Server) validate(req *RunRequest, caller Caller) error {
	bad := func(field, format string, a ...any) error {
		return &api.FieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	n := len(req.Commands)
	if n == 0 {
		return bad("commands", "no command given")
	}
	maxCmds := s.cfg.Parallel
	if s.cfg.Caps.Commands > 0 {
		maxCmds = min(maxCmds, s.cfg.Caps.Commands)
	}
	if n > maxCmds {
		return bad("commands", "%d commands: this service runs at most %d at once", n, maxCmds)
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
		if err := s.cfg.Caps.apply(&c.Spec, p+"."); err != nil {
			return err
		}
		if err := hostPaths(&c.Spec, caller, p); err != nil {
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

// hostPaths refuses host paths to a caller without root's rights on the
// host: the service would open them with its own.
func hostPaths(s *api.Spec, caller Caller, prefix string) error {
	if caller.Root() {
		return nil
	}
	refuse := func(field, what string) error {
		if prefix != "" {
			field = prefix + "." + field
		}
		return &api.FieldError{Field: field, Msg: what + " needs a root caller on the unix socket (the service opens no host path on another caller's behalf)"}
	}
	switch {
	case len(s.Binds) > 0:
		return refuse("binds", "binding host paths")
	case strings.Contains(s.Image, "/"):
		return refuse("image", "an image given as a host path")
	case strings.Contains(s.Seccomp, "/"):
		return refuse("seccomp", "a seccomp profile given as a host path")
	case s.BoxID != nil:
		return refuse("box_id", "choosing a box id")
	}
	return nil
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

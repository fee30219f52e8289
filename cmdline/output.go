package cmdline

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/ioi"
	"github.com/isolate-sandbox/isolate/isolate"
)

// emitReport writes the report as JSON (stdout and/or a file), as a meta
// file, or else as a summary line on stderr. Without --json and --stream,
// captured output is passed through to the caller's stdout/stderr.
func (iv *invocation) emitReport(r *isolate.Report) error {
	r.Message = iv.asGiven(r.Message)
	v := &iv.values
	if v.report != "" {
		if err := iv.writeJSON(v.report, r); err != nil {
			return err
		}
	}
	if v.meta != "" {
		if err := iv.writeMeta(v.meta, r); err != nil {
			return err
		}
	}
	if v.json {
		enc := json.NewEncoder(iv.Stdout)
		return enc.Encode(r)
	}
	if !v.stream {
		iv.Stdout.WriteString(r.Stdout)
		iv.Stderr.WriteString(r.Stderr)
	}
	fmt.Fprintln(iv.Stderr, summary(r))
	return nil
}

func (iv *invocation) writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return iv.writeOutput(path, append(data, '\n'))
}

// checkOutputs opens the report and meta files the caller named before
// anything runs: a path that cannot be written is a usage error then, not
// after the program ran.
func (iv *invocation) checkOutputs(paths ...string) error {
	for _, p := range paths {
		if p == "" || p == "-" {
			continue
		}
		f, err := iv.openOutput(p, 0)
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

// openOutput opens a file the caller named for writing, with the caller's
// rights: created if need be, its last component never a symlink
// followed, a regular file only.
func (iv *invocation) openOutput(path string, flags int) (*os.File, error) {
	var fd int
	err := isolate.AsCaller(iv.Caller, func() (err error) {
		fd, err = unix.Open(iv.hostPath(path), unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|flags, 0o644)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return f, nil
}

func (iv *invocation) writeOutput(path string, data []byte) error {
	f, err := iv.openOutput(path, unix.O_TRUNC)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// summary is the one-line account of a run.
func summary(r *isolate.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "isolate: %s", r.Status)
	if r.Message != "" {
		// Escaped: a name in the message (a file the program named)
		// cannot start a line of its own, such as a forged "isolate: OK".
		q := strconv.Quote(r.Message)
		fmt.Fprintf(&b, " (%s)", q[1:len(q)-1])
	}
	fmt.Fprintf(&b, " exit=%d cpu=%.3fs wall=%.3fs mem=%dKiB box=%d", r.ExitCode, r.CPUTime, r.WallTime, r.MemoryPeak>>10, r.BoxID)
	if r.Sandbox.Cgroup == "none" {
		// Without root or a cgroup: rlimits alone, which measure no
		// memory peak (mem=0).
		b.WriteString(" limits=rlimit")
	}
	if r.Signal != 0 {
		fmt.Fprintf(&b, " signal=%d", r.Signal)
	}
	return b.String()
}

// writeMeta writes ioi/isolate's meta file ("-" is stdout), with
// ioi/isolate's keys and statuses (see MetaText).
func (iv *invocation) writeMeta(path string, r *isolate.Report) error {
	text := ioi.MetaText(r)
	if path == "-" {
		_, err := iv.Stdout.WriteString(text)
		return err
	}
	return iv.writeOutput(path, []byte(text))
}

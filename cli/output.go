package cmdline

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/isolate-sandbox/isolate/cli/ioi"
	"github.com/isolate-sandbox/isolate/internal/jsonout"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
)

// emitReport writes the report as JSON (stdout and/or a file), as a meta
// file, or else as a summary line on stderr. Without --json and --stream,
// captured output is passed through to the caller's stdout/stderr.
func (iv *invocation) emitReport(r *isolate.Report, files *outputFiles) error {
	r.Message = iv.asGiven(r.Message)
	v := &iv.values
	if files.report != nil {
		if err := writeJSON(files.report, r, "  "); err != nil {
			return err
		}
	}
	if v.meta != "" {
		if err := iv.writeMeta(files.meta, r); err != nil {
			return err
		}
	}
	if v.json {
		return writeJSON(iv.Stdout, r, "")
	}
	if !v.stream {
		iv.Stdout.WriteString(r.Stdout)
		iv.Stderr.WriteString(r.Stderr)
	}
	fmt.Fprintln(iv.Stderr, summary(r))
	return nil
}

// writeJSON writes v as json.Encoder would (indented by indent), its
// captured output in pieces: a service running a handed-over command
// holds the report, not its encoding (jsonout).
func writeJSON(f io.Writer, v any, indent string) error {
	e, err := jsonout.Encode(v, jsonout.Options{EscapeHTML: true, Indent: indent})
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	if err := e.Write(w); err != nil {
		return err
	}
	return w.Flush()
}

// outputFiles are the report and meta files the caller named, open.
type outputFiles struct{ report, meta *os.File }

// openOutputs opens the report and meta files the caller named before
// anything runs, with the caller's rights, no symlink followed anywhere
// in their paths: a path that cannot be written is a usage error then,
// not after the program ran, and the files are written through these
// descriptors after the run, never opened again by name (the program
// may have replaced a directory of the path meanwhile, in a read-write
// bind).
func (iv *invocation) openOutputs() (*outputFiles, error) {
	o := &outputFiles{}
	v := &iv.values
	for _, f := range []struct {
		option, path string
		dst          **os.File
	}{{"--report", v.report, &o.report}, {"--meta", v.meta, &o.meta}} {
		if f.path == "" || f.path == "-" && f.option == "--meta" {
			continue
		}
		file, err := hostfs.CreateReportFile(iv.cred, iv.hostPath(f.path))
		if err != nil {
			o.close()
			return nil, fmt.Errorf("%s %s: %v", f.option, f.path, trimPath(err, iv.hostPath(f.path)))
		}
		*f.dst = file
	}
	return o, nil
}

// trimPath drops the path from the front of err's message, which names
// it already.
func trimPath(err error, path string) string {
	return strings.TrimPrefix(err.Error(), path+": ")
}

func (o *outputFiles) close() {
	for _, f := range []*os.File{o.report, o.meta} {
		if f != nil {
			f.Close()
		}
	}
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
	if r.Sandbox.User == "subordinate" {
		// Without root, a box user of its own (not the caller).
		b.WriteString(" user=subordinate")
	}
	if r.Signal != 0 {
		fmt.Fprintf(&b, " signal=%d", r.Signal)
	}
	return b.String()
}

// writeMeta writes ioi/isolate's meta file (f; nil: stdout, "-"), with
// ioi/isolate's keys and statuses (see MetaText).
func (iv *invocation) writeMeta(f *os.File, r *isolate.Report) error {
	text := ioi.MetaText(r)
	if f == nil {
		_, err := iv.Stdout.WriteString(text)
		return err
	}
	_, err := f.WriteString(text)
	return err
}

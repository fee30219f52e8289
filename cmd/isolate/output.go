package main

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
// captured output is passed through to isolate's own stdout/stderr.
func emitReport(r *isolate.Report, asJSON bool, reportFile, metaFile string, streamed bool) error {
	if reportFile != "" {
		if err := writeJSON(reportFile, r); err != nil {
			return err
		}
	}
	if metaFile != "" {
		if err := writeMeta(metaFile, r); err != nil {
			return err
		}
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		return enc.Encode(r)
	}
	if !streamed {
		os.Stdout.WriteString(r.Stdout)
		os.Stderr.WriteString(r.Stderr)
	}
	fmt.Fprintln(os.Stderr, summary(r))
	return nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeOutput(path, append(data, '\n'))
}

// checkOutputs opens the report and meta files the caller named before
// anything runs: a path that cannot be written is a usage error then, not
// after the program ran.
func checkOutputs(paths ...string) error {
	for _, p := range paths {
		if p == "" || p == "-" {
			continue
		}
		f, err := openOutput(p, 0)
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

// openOutput opens a file the caller named for writing: created if need
// be, its last component never a symlink followed, a regular file only.
func openOutput(path string, flags int) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|flags, 0o644)
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

func writeOutput(path string, data []byte) error {
	f, err := openOutput(path, unix.O_TRUNC)
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
	if r.Signal != 0 {
		fmt.Fprintf(&b, " signal=%d", r.Signal)
	}
	return b.String()
}

// writeMeta writes ioi/isolate's meta file ("-" is stdout), with
// ioi/isolate's keys and statuses (see MetaText).
func writeMeta(path string, r *isolate.Report) error {
	text := ioi.MetaText(r)
	if path == "-" {
		_, err := os.Stdout.WriteString(text)
		return err
	}
	return writeOutput(path, []byte(text))
}

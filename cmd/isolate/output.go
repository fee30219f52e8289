package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

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
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// summary is the one-line account of a run.
func summary(r *isolate.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "isolate: %s", r.Status)
	if r.Message != "" {
		fmt.Fprintf(&b, " (%s)", r.Message)
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
	return os.WriteFile(path, []byte(text), 0o644)
}

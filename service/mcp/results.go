package mcp

import (
	"encoding/base64"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/isolate-sandbox/isolate/api"
)

// RunResult is how a program ended, what it printed and what it used.
type RunResult struct {
	Status   string `json:"status" jsonschema:"OK (exit 0 within limits), RE (non-zero exit), SG (killed by a signal), TO (time limit), ML (memory limit), CE (compilation failed), XX (the sandbox failed)"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	Limit    string `json:"limit,omitempty" jsonschema:"the limit reached: cpu or wall"`
	Message  string `json:"message,omitempty"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	// StdoutTruncated: the middle of a long stdout was cut (a marker in
	// the text says how much).
	StdoutTruncated bool       `json:"stdout_truncated,omitempty"`
	StderrTruncated bool       `json:"stderr_truncated,omitempty"`
	Error           *ErrorInfo `json:"error,omitempty" jsonschema:"the exception or error the program died of, where it can be told"`
	// Compile is the compiler's output when compilation failed.
	Compile    *CompileOutput `json:"compile,omitempty"`
	CPUTime    float64        `json:"cpu_time" jsonschema:"seconds of CPU, all processes and threads"`
	WallTime   float64        `json:"wall_time" jsonschema:"seconds"`
	MemoryPeak int64          `json:"memory_peak" jsonschema:"bytes"`
}

// CompileOutput is a failed compilation's output.
type CompileOutput struct {
	Status string `json:"status"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

// ErrorInfo is an exception: its type's name, its message, its traceback.
type ErrorInfo struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback,omitempty"`
}

// outputs are a command's streams as they came.
type outputs struct{ stdout, stderr headTail }

func (o *outputs) add(stream, data string) {
	switch stream {
	case "stdout":
		o.stdout.Write([]byte(data))
	case "stderr":
		o.stderr.Write([]byte(data))
	}
}

// runResult is a run's report with its streams as they came (the
// report's own, cut at their head, where nothing streamed).
func runResult(rep *api.Report, out *outputs, language string) *RunResult {
	res := &RunResult{Status: string(rep.Status), ExitCode: rep.ExitCode, Signal: rep.Signal, Limit: rep.Limit,
		Message: rep.Message, CPUTime: rep.CPUTime, WallTime: rep.WallTime, MemoryPeak: rep.MemoryPeak}
	res.Stdout, res.StdoutTruncated = streamText(&out.stdout, rep.Stdout, rep.StdoutTruncated)
	res.Stderr, res.StderrTruncated = streamText(&out.stderr, rep.Stderr, rep.StderrTruncated)
	if rep.Status != api.StatusOK {
		res.Error = errorOf(res, language)
	}
	return res
}

// streamText is what streamed, or the report's text if nothing did.
func streamText(h *headTail, report string, truncated bool) (string, bool) {
	if h.total == 0 {
		return report, truncated
	}
	return h.text()
}

// execResult is run_code's result: the run's, or the compiler's when it
// failed.
func execResult(rep *api.ExecReport, out *outputs, language string) *RunResult {
	if rep.Run != nil {
		res := runResult(rep.Run, out, language)
		return res
	}
	c := rep.Compile
	if c == nil {
		return &RunResult{Status: string(rep.Status), Message: "nothing ran"}
	}
	res := &RunResult{Status: string(rep.Status), ExitCode: c.ExitCode, Message: c.Message, CPUTime: c.CPUTime,
		WallTime: c.WallTime, MemoryPeak: c.MemoryPeak,
		Compile: &CompileOutput{Status: string(c.Status), Stdout: c.Stdout, Stderr: c.Stderr}}
	res.Error = errorOf(&RunResult{Status: res.Status, Stderr: c.Stderr + c.Stdout, Message: c.Message}, language)
	return res
}

// errorOf names what a failed program died of: a Python exception from
// its traceback, else the status itself.
func errorOf(res *RunResult, language string) *ErrorInfo {
	if language == "python" || strings.Contains(res.Stderr, "Traceback (most recent call last):") {
		if e := pythonError(res.Stderr); e != nil {
			return e
		}
	}
	switch api.Status(res.Status) {
	case api.StatusTO:
		return &ErrorInfo{Name: "TimeLimitExceeded", Value: "the " + orWord(res.Limit, "time") + " limit was reached"}
	case api.StatusML:
		return &ErrorInfo{Name: "MemoryLimitExceeded", Value: "the memory limit was reached"}
	case api.StatusSG:
		return &ErrorInfo{Name: "Signal", Value: fmt.Sprintf("killed by signal %d", res.Signal)}
	case api.StatusRE:
		return &ErrorInfo{Name: "NonZeroExit", Value: fmt.Sprintf("exit code %d", res.ExitCode)}
	case api.StatusXX:
		return &ErrorInfo{Name: "SandboxError", Value: res.Message}
	}
	return &ErrorInfo{Name: res.Status, Value: res.Message}
}

func orWord(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// pythonError reads the exception a Python traceback ends with (a
// SyntaxError's has no "Traceback" line).
func pythonError(stderr string) *ErrorInfo {
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	start := -1
	for i, l := range lines {
		if l == "Traceback (most recent call last):" || strings.HasPrefix(l, "  File \"") && start < 0 {
			start = i
			break
		}
	}
	if start < 0 {
		return nil
	}
	last := lines[len(lines)-1]
	name, value, _ := strings.Cut(last, ": ")
	if name == "" || strings.ContainsAny(name, " \t") {
		return nil
	}
	return &ErrorInfo{Name: name, Value: value, Traceback: strings.Join(lines[start:], "\n")}
}

// toolResult is r as a tool's result: isError unless the program
// succeeded, and a text a model reads first.
func (r *RunResult) toolResult() *sdk.CallToolResult {
	var b strings.Builder
	fmt.Fprintf(&b, "status %s", r.Status)
	switch {
	case r.Status == string(api.StatusCE):
	case r.Signal != 0:
		fmt.Fprintf(&b, " (signal %d)", r.Signal)
	default:
		fmt.Fprintf(&b, " (exit code %d)", r.ExitCode)
	}
	if r.Limit != "" {
		fmt.Fprintf(&b, ", %s limit reached", r.Limit)
	}
	fmt.Fprintf(&b, ", cpu %.3f s, wall %.3f s, memory peak %d KiB\n", r.CPUTime, r.WallTime, r.MemoryPeak>>10)
	if r.Message != "" {
		fmt.Fprintf(&b, "message: %s\n", r.Message)
	}
	if r.Compile != nil {
		section(&b, "compiler output", r.Compile.Stdout+r.Compile.Stderr)
	}
	section(&b, "stdout", r.Stdout)
	section(&b, "stderr", r.Stderr)
	if r.Error != nil && r.Error.Traceback == "" {
		fmt.Fprintf(&b, "error: %s: %s\n", r.Error.Name, r.Error.Value)
	}
	return &sdk.CallToolResult{IsError: r.Status != string(api.StatusOK), Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}
}

func section(b *strings.Builder, name, text string) {
	if text == "" {
		return
	}
	fmt.Fprintf(b, "--- %s ---\n%s", name, text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteByte('\n')
	}
}

func decodeBase64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

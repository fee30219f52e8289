package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/service/server"
)

// maxReadBytes bounds a file session_read_file returns.
const maxReadBytes = 1 << 20

// CreateSessionInput is create_session's arguments.
type CreateSessionInput struct {
	Language        string  `json:"language,omitempty" jsonschema:"run on this language's image, and session_run_code in it (default python, whose image must be built; without one the host's programs)"`
	LifetimeSeconds float64 `json:"lifetime_seconds,omitempty" jsonschema:"how long the session may live (default 300; the service caps it)"`
	MemoryMB        int64   `json:"memory_mb,omitempty" jsonschema:"memory of the whole session in MiB (default 512)"`
	Keep            bool    `json:"keep,omitempty" jsonschema:"keep the session after this MCP connection closes, until its lifetime ends"`
}

// SessionInfo is a session just made.
type SessionInfo struct {
	SessionID string    `json:"session_id"`
	ExpiresAt time.Time `json:"expires_at"`
	Kept      bool      `json:"kept" jsonschema:"the session outlives this MCP connection"`
}

func (c *conn) createSession(ctx context.Context, _ *sdk.CallToolRequest, in CreateSessionInput) (*sdk.CallToolResult, *SessionInfo, error) {
	req := server.SessionRequest{Lang: in.Language}
	var err error
	if req.TimeoutMs, err = seconds("lifetime_seconds", in.LifetimeSeconds); err != nil {
		return nil, nil, err
	}
	if in.MemoryMB < 0 || in.MemoryMB > 1<<20 {
		return nil, nil, fmt.Errorf("memory_mb: %d is out of range (1 to 1048576)", in.MemoryMB)
	}
	req.MemoryBytes = in.MemoryMB << 20
	var ans server.SessionAnswer
	if err := call(ctx, c.api, http.MethodPost, "/v1/sessions", &req, &ans); err != nil {
		return nil, nil, toolError(sessionField(err))
	}
	if !in.Keep {
		c.mu.Lock()
		c.own[ans.ID] = true
		c.mu.Unlock()
	}
	info := &SessionInfo{SessionID: ans.ID, ExpiresAt: ans.ExpiresAt, Kept: in.Keep}
	return text(fmt.Sprintf("session %s, until %s", ans.ID, ans.ExpiresAt.Format(time.RFC3339))), info, nil
}

// sessionField renames the API's session fields as the tool names them.
func sessionField(err error) error {
	var ae *APIError
	if errors.As(err, &ae) {
		r := strings.NewReplacer("timeout_ms", "lifetime_seconds", "memory_bytes", "memory_mb", "lang:", "language:")
		ae.Message = r.Replace(ae.Message)
	}
	return err
}

// SessionCodeInput is session_run_code's arguments.
type SessionCodeInput struct {
	SessionID      string  `json:"session_id"`
	Code           string  `json:"code" jsonschema:"the code; the value of its last expression is returned as result (Python, JavaScript)"`
	Language       string  `json:"language,omitempty" jsonschema:"python (default), javascript or bash: each has its own interpreter in the session"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"wall time of this call (default 60)"`
}

// CodeResult is what code run in a session gave.
type CodeResult struct {
	Result          *string    `json:"result" jsonschema:"repr of the last expression's value, or null"`
	Stdout          string     `json:"stdout"`
	Stderr          string     `json:"stderr"`
	StdoutTruncated bool       `json:"stdout_truncated,omitempty"`
	StderrTruncated bool       `json:"stderr_truncated,omitempty"`
	Error           *ErrorInfo `json:"error,omitempty" jsonschema:"the exception the code raised (ContextDied: the interpreter itself died and the next call starts a fresh one)"`
	ExecutionCount  int        `json:"execution_count"`
	Restarted       bool       `json:"restarted,omitempty" jsonschema:"the interpreter had died and this call ran in a fresh one: earlier state is gone"`
	// Results are what display() showed and the last value's rich forms
	// (images come as image content beside the text).
	Results []RichResult `json:"results,omitempty" jsonschema:"rich results: what display() showed and the last value's forms; images (PNG, JPEG) come as image content"`
}

// RichResult is one rich result's text forms, and which images it had.
type RichResult struct {
	Text     string   `json:"text,omitempty"`
	HTML     string   `json:"html,omitempty"`
	Markdown string   `json:"markdown,omitempty"`
	LaTeX    string   `json:"latex,omitempty"`
	SVG      string   `json:"svg,omitempty"`
	JSON     any      `json:"json,omitempty"`
	Images   []string `json:"images,omitempty" jsonschema:"MIME types of its images, in the tool result's image content"`
}

func (c *conn) sessionRunCode(ctx context.Context, _ *sdk.CallToolRequest, in SessionCodeInput) (*sdk.CallToolResult, *CodeResult, error) {
	ms, err := seconds("timeout_seconds", in.TimeoutSeconds)
	if err != nil {
		return nil, nil, err
	}
	var out outputs
	var exe *server.CodeAnswer
	type line struct {
		Type string `json:"type"`
		Data string `json:"data"`
		server.CodeAnswer
	}
	err = stream(ctx, c.api, sessionPath(in.SessionID, "code"), &server.CodeRequest{Code: in.Code, Language: in.Language, TimeoutMs: ms, Stream: true}, func(l *line) error {
		switch l.Type {
		case "stdout", "stderr":
			out.add(l.Type, l.Data)
		case "execution":
			exe = &l.CodeAnswer
		}
		return nil
	})
	if err == nil && exe == nil {
		err = errNoAnswer
	}
	if err != nil {
		return nil, nil, toolError(err)
	}
	res := &CodeResult{Result: exe.Result, ExecutionCount: exe.ExecutionCount, Restarted: exe.Restarted}
	res.Stdout, res.StdoutTruncated = streamText(&out.stdout, exe.Stdout, false)
	res.Stderr, res.StderrTruncated = streamText(&out.stderr, exe.Stderr, false)
	var b strings.Builder
	if exe.Error != nil {
		res.Error = &ErrorInfo{Name: exe.Error.Name, Value: exe.Error.Value, Traceback: exe.Error.Traceback}
	}
	fmt.Fprintf(&b, "[%d]", res.ExecutionCount)
	if res.Restarted {
		b.WriteString(" (the interpreter had died: this ran in a fresh one)")
	}
	b.WriteByte('\n')
	section(&b, "stdout", res.Stdout)
	section(&b, "stderr", res.Stderr)
	if res.Result != nil {
		section(&b, "result", *res.Result)
	}
	if e := res.Error; e != nil {
		section(&b, "error", orWord(e.Traceback, e.Name+": "+e.Value))
	}
	content := []sdk.Content{&sdk.TextContent{Text: b.String()}}
	for _, r := range exe.Results {
		rr := RichResult{Text: r.Text, HTML: r.HTML, Markdown: r.Markdown, LaTeX: r.LaTeX, SVG: r.SVG}
		if len(r.JSON) > 0 {
			rr.JSON = r.JSON
		}
		for _, img := range []struct{ data, mime string }{{r.PNG, "image/png"}, {r.JPEG, "image/jpeg"}} {
			if raw, err := decodeBase64(img.data); img.data != "" && err == nil {
				content = append(content, &sdk.ImageContent{Data: raw, MIMEType: img.mime})
				rr.Images = append(rr.Images, img.mime)
			}
		}
		res.Results = append(res.Results, rr)
	}
	return &sdk.CallToolResult{IsError: res.Error != nil, Content: content}, res, nil
}

// SessionCommandInput is session_run_command's arguments.
type SessionCommandInput struct {
	SessionID      string  `json:"session_id"`
	Command        string  `json:"command" jsonschema:"a shell command line, run as /bin/sh -c COMMAND"`
	Cwd            string  `json:"cwd,omitempty" jsonschema:"working directory, absolute (default /box)"`
	Stdin          string  `json:"stdin,omitempty" jsonschema:"the command's standard input (default: none)"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"wall time of the command (default 60)"`
}

func (c *conn) sessionRunCommand(ctx context.Context, _ *sdk.CallToolRequest, in SessionCommandInput) (*sdk.CallToolResult, *RunResult, error) {
	req := server.SessionCommandRequest{Args: []string{"/bin/sh", "-c", in.Command}, Cwd: in.Cwd, Stream: true, OutputLimitBytes: headBytes}
	if in.Stdin != "" {
		req.Stdin = &in.Stdin
	}
	var err error
	if req.TimeoutMs, err = seconds("timeout_seconds", in.TimeoutSeconds); err != nil {
		return nil, nil, err
	}
	var out outputs
	var rep *api.Report
	type line struct {
		Type string `json:"type"`
		Data string `json:"data"`
		api.Report
	}
	err = stream(ctx, c.api, sessionPath(in.SessionID, "commands"), &req, func(l *line) error {
		switch l.Type {
		case "stdout", "stderr":
			out.add(l.Type, l.Data)
		case "report":
			rep = &l.Report
		}
		return nil
	})
	if err == nil && rep == nil {
		err = errNoAnswer
	}
	if err != nil {
		return nil, nil, toolError(err)
	}
	res := runResult(rep, &out, "")
	return res.toolResult(), res, nil
}

// WriteFileInput is session_write_file's arguments.
type WriteFileInput struct {
	SessionID  string `json:"session_id"`
	Path       string `json:"path" jsonschema:"absolute under /box or /tmp, or relative to /box"`
	Content    string `json:"content"`
	Encoding   string `json:"encoding,omitempty" jsonschema:"text (default) or base64"`
	Executable bool   `json:"executable,omitempty" jsonschema:"make the file executable"`
}

// FileInfo is a file of a session.
type FileInfo struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	IsDir bool   `json:"is_dir,omitempty"`
	Mode  string `json:"mode,omitempty"`
	Name  string `json:"name,omitempty"`
}

func (c *conn) sessionWriteFile(ctx context.Context, _ *sdk.CallToolRequest, in WriteFileInput) (*sdk.CallToolResult, *FileInfo, error) {
	body := []byte(in.Content)
	switch in.Encoding {
	case "", "text":
	case "base64":
		b, err := decodeBase64(in.Content)
		if err != nil {
			return nil, nil, fmt.Errorf("content: not base64: %v", err)
		}
		body = b
	default:
		return nil, nil, fmt.Errorf("encoding: %q is neither text nor base64", in.Encoding)
	}
	mode := "0644"
	if in.Executable {
		mode = "0755"
	}
	resp, err := c.api.Do(ctx, http.MethodPut, sessionFilePath(in.SessionID, in.Path)+"?mode="+mode, bytes.NewReader(body), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if err := failure(resp); err != nil {
		return nil, nil, toolError(err)
	}
	info := &FileInfo{Path: boxPath(in.Path), Size: int64(len(body))}
	return text(fmt.Sprintf("wrote %d bytes to %s", info.Size, info.Path)), info, nil
}

// ReadFileInput is session_read_file's arguments.
type ReadFileInput struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path" jsonschema:"absolute under /box or /tmp, or relative to /box"`
}

// FileContent is a file read from a session.
type FileContent struct {
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	Content  string `json:"content"`
	Encoding string `json:"encoding" jsonschema:"text, or base64 for bytes that are not UTF-8"`
}

func (c *conn) sessionReadFile(ctx context.Context, _ *sdk.CallToolRequest, in ReadFileInput) (*sdk.CallToolResult, *FileContent, error) {
	var st fileStat
	if err := call(ctx, c.api, http.MethodGet, sessionFilePath(in.SessionID, in.Path)+"?stat=1", nil, &st); err != nil {
		return nil, nil, toolError(err)
	}
	if st.IsDir {
		return nil, nil, fmt.Errorf("path: %s is a directory (session_list_files lists it)", boxPath(in.Path))
	}
	if st.Size > maxReadBytes {
		return nil, nil, fmt.Errorf("path: %s is %d bytes; at most %d are read here (session_run_command with head, tail or grep reads part of it)", boxPath(in.Path), st.Size, maxReadBytes)
	}
	resp, err := c.api.Do(ctx, http.MethodGet, sessionFilePath(in.SessionID, in.Path), nil, nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if err := failure(resp); err != nil {
		return nil, nil, toolError(err)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReadBytes+1))
	if err != nil {
		return nil, nil, err
	}
	if len(b) > maxReadBytes {
		return nil, nil, fmt.Errorf("path: %s grew past %d bytes while it was read", boxPath(in.Path), maxReadBytes)
	}
	fc := &FileContent{Path: boxPath(in.Path), Size: int64(len(b)), Content: string(b), Encoding: "text"}
	if !utf8.Valid(b) {
		fc.Content, fc.Encoding = encodeBase64(b), "base64"
		return text(fmt.Sprintf("%s: %d bytes, not UTF-8 (base64 in the structured result)", fc.Path, fc.Size)), fc, nil
	}
	return text(fc.Content), fc, nil
}

// ListFilesInput is session_list_files' arguments.
type ListFilesInput struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path,omitempty" jsonschema:"a directory (default /box)"`
}

// FileList is a directory's entries.
type FileList struct {
	Path    string     `json:"path"`
	Entries []FileInfo `json:"entries"`
}

func (c *conn) sessionListFiles(ctx context.Context, _ *sdk.CallToolRequest, in ListFilesInput) (*sdk.CallToolResult, *FileList, error) {
	dir := in.Path
	if dir == "" {
		dir = "/box"
	}
	var ans struct {
		Entries []fileStat `json:"entries"`
	}
	if err := call(ctx, c.api, http.MethodGet, sessionFilePath(in.SessionID, dir)+"?list=1", nil, &ans); err != nil {
		return nil, nil, toolError(err)
	}
	list := &FileList{Path: boxPath(dir), Entries: []FileInfo{}}
	var b strings.Builder
	for _, e := range ans.Entries {
		fi := FileInfo{Name: e.Name, Path: e.Path, Size: e.Size, IsDir: e.IsDir, Mode: fmt.Sprintf("%04o", e.Mode&0o7777)}
		list.Entries = append(list.Entries, fi)
		kind := "file"
		if e.IsDir {
			kind = "dir "
		}
		fmt.Fprintf(&b, "%s %10d  %s\n", kind, e.Size, e.Name)
	}
	if len(ans.Entries) == 0 {
		b.WriteString("(empty)\n")
	}
	return text(b.String()), list, nil
}

// SessionRef names a session.
type SessionRef struct {
	SessionID string `json:"session_id"`
}

// Closed says a session ended.
type Closed struct {
	SessionID string `json:"session_id"`
	Closed    bool   `json:"closed"`
}

func (c *conn) closeSession(ctx context.Context, _ *sdk.CallToolRequest, in SessionRef) (*sdk.CallToolResult, *Closed, error) {
	if err := call(ctx, c.api, http.MethodDelete, "/v1/sessions/"+url.PathEscape(in.SessionID), nil, nil); err != nil {
		return nil, nil, toolError(err)
	}
	c.mu.Lock()
	delete(c.own, in.SessionID)
	c.mu.Unlock()
	return text("session " + in.SessionID + " closed"), &Closed{SessionID: in.SessionID, Closed: true}, nil
}

// Description is what describe_sandbox returns.
type Description struct {
	Languages     []string         `json:"languages" jsonschema:"languages whose images are built here: run_code, run_command's language and sessions use them"`
	CodeLanguages []string         `json:"code_languages" jsonschema:"languages of session_run_code's interpreters (each needs its program in the session's image)"`
	Limits        map[string]int64 `json:"limits" jsonschema:"the largest limits this caller may ask, by the API's field names (absent: no cap)"`
	Version       string           `json:"version"`
}

func (c *conn) describe(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, *Description, error) {
	var h server.Health
	if err := call(ctx, c.api, http.MethodGet, "/v1/health", nil, &h); err != nil {
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
			return nil, nil, toolError(err)
		}
	}
	d := &Description{Languages: h.Images, CodeLanguages: h.CodeLanguages, Limits: map[string]int64{}}
	if d.Languages == nil {
		d.Languages = []string{}
	}
	if d.CodeLanguages == nil {
		d.CodeLanguages = []string{}
	}
	var v struct {
		Version string `json:"version"`
	}
	if err := call(ctx, c.api, http.MethodGet, "/v1/version", nil, &v); err == nil {
		d.Version = v.Version
	}
	if err := call(ctx, c.api, http.MethodGet, "/v1/limits", nil, &d.Limits); err != nil {
		return nil, nil, toolError(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "languages: %s\n", strings.Join(d.Languages, ", "))
	fmt.Fprintf(&b, "session code languages: %s\n", strings.Join(d.CodeLanguages, ", "))
	for _, k := range sortedKeys(d.Limits) {
		fmt.Fprintf(&b, "%s: %v\n", k, d.Limits[k])
	}
	return text(b.String()), d, nil
}

func sessionPath(id, what string) string { return "/v1/sessions/" + url.PathEscape(id) + "/" + what }

// sessionFilePath is the API path of a session's file; an absolute path
// keeps its slash escaped (docs/API.md, Files).
func sessionFilePath(id, p string) string {
	if strings.HasPrefix(p, "/") {
		return sessionPath(id, "files/") + url.PathEscape(p)
	}
	return sessionPath(id, "files/") + escapePath(p)
}

// escapePath escapes each element of a relative path.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func text(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}

// fileStat is the API's description of a session's file.
type fileStat struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Mode  uint32 `json:"mode"`
	IsDir bool   `json:"is_dir"`
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

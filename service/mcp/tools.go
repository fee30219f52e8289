package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/service/server"
)

// Version is the server's version in the MCP handshake.
var Version = "dev"

// Instructions tell a client's model what the server is for, where the
// client shows them.
const Instructions = `isolate runs untrusted code in a Linux sandbox on this machine: its own namespaces, a read-only
root, no network, CPU and memory limits, no privileges. Use run_code for one program in a language,
run_command for a shell command, and a session (create_session, then session_* tools) to keep files,
processes and interpreter state across calls. Every result says how the program ended (status OK, RE,
TO, ML, SG, CE or XX), its output (long output keeps its beginning and end) and what it used.`

// conn is one MCP connection's tools: the API they call, and the
// sessions the connection made, which end with it unless kept.
type conn struct {
	api API
	mu  sync.Mutex
	own map[string]bool // session id -> made here and not kept
}

// newServer is an MCP server for one connection, whose tools call a.
// When the connection ends, the sessions it made (those not kept) end,
// then ended is called with the connection's id.
func newServer(a API, ended func(id string)) (*sdk.Server, *conn) {
	c := &conn{api: a, own: map[string]bool{}}
	s := sdk.NewServer(&sdk.Implementation{Name: "isolate", Title: "isolate sandbox", Version: Version},
		&sdk.ServerOptions{
			Instructions: Instructions,
			Capabilities: &sdk.ServerCapabilities{},
			InitializedHandler: func(_ context.Context, req *sdk.InitializedRequest) {
				ss := req.Session
				go func() {
					ss.Wait()
					c.close()
					if ended != nil {
						ended(ss.ID())
					}
				}()
			},
		})
	c.register(s)
	return s, c
}

// close deletes the sessions the connection made and did not keep.
func (c *conn) close() {
	c.mu.Lock()
	ids := c.own
	c.own = map[string]bool{}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for id := range ids {
		call(ctx, c.api, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, nil)
	}
}

func boolp(b bool) *bool { return &b }

func (c *conn) register(s *sdk.Server) {
	readOnly := &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: boolp(false)}
	closed := &sdk.ToolAnnotations{OpenWorldHint: boolp(false), DestructiveHint: boolp(false)}
	sdk.AddTool(s, &sdk.Tool{Name: "run_code", Annotations: closed, Description: `Compile (if the language compiles) and run one source file in a fresh sandbox, then throw the sandbox away.
Languages: those describe_sandbox lists (python, c, cpp, go, java, javascript, rust where their images are built).
The program reads stdin, has no network, a read-only root and a writable /box (its working directory) and /tmp.
Defaults: no CPU limit, 60 s of wall time, 512 MiB of memory. A program that fails (non-zero exit, a limit,
a compile error) is a result with isError and status RE, TO, ML, SG or CE; its output and error say why.`},
		c.runCode)
	sdk.AddTool(s, &sdk.Tool{Name: "run_command", Annotations: closed, Description: `Run a shell command (/bin/sh -c COMMAND) in a fresh sandbox, then throw the sandbox away.
The root file system is the host's programs read-only (or a language's image with "language"); "files" are
written into the box first (paths under /box or /tmp; relative paths are under /box). No network.
Defaults as run_code. Use a session instead to keep files or processes between calls.`},
		c.runCommand)
	sdk.AddTool(s, &sdk.Tool{Name: "create_session", Annotations: closed, Description: `Start a session: one sandbox that lives across calls, keeping its files (/box, /tmp), its background
processes and its interpreter state. Returns session_id for the session_* tools. It ends with close_session,
when this MCP connection closes (unless keep is true), or when its lifetime (default 300 s) or 10 minutes
without use run out. Memory (default 512 MiB) bounds the whole session.`},
		c.createSession)
	sdk.AddTool(s, &sdk.Tool{Name: "session_run_code", Annotations: closed, Description: `Run code in a session's interpreter (Python; or JavaScript, Bash with language), keeping variables, imports and definitions from one call
to the next, like a notebook cell. Returns the value of the last expression (result), the output, and the
exception (name, value, traceback) with isError if the code raised one. Default timeout 60 s.`},
		c.sessionRunCode)
	sdk.AddTool(s, &sdk.Tool{Name: "session_run_command", Annotations: closed, Description: `Run a shell command (/bin/sh -c COMMAND) in a session, in /box unless cwd says otherwise; files it
writes stay for the next call. Default timeout 60 s. A command that fails is a result with isError.`},
		c.sessionRunCommand)
	sdk.AddTool(s, &sdk.Tool{Name: "session_write_file", Annotations: closed, Description: `Write a file into a session (a path under /box or /tmp; relative paths are under /box). Directories
are made as needed. content is text, or base64 when encoding is "base64".`},
		c.sessionWriteFile)
	sdk.AddTool(s, &sdk.Tool{Name: "session_read_file", Annotations: readOnly, Description: `Read a file of a session (a path under /box or /tmp; relative paths are under /box), at most 1 MiB:
as text when it is UTF-8, else as base64.`},
		c.sessionReadFile)
	sdk.AddTool(s, &sdk.Tool{Name: "session_list_files", Annotations: readOnly, Description: `List a directory of a session (default /box): names, sizes, modes, and which are directories.`},
		c.sessionListFiles)
	sdk.AddTool(s, &sdk.Tool{Name: "close_session", Annotations: &sdk.ToolAnnotations{OpenWorldHint: boolp(false), IdempotentHint: true}, Description: `End a session now: every process in it is killed and its files are gone.`},
		c.closeSession)
	sdk.AddTool(s, &sdk.Tool{Name: "describe_sandbox", Annotations: readOnly, Description: `What this sandbox offers: the languages run_code and sessions can use, and the limits that apply to
this caller (the largest time, memory and output a call may ask for; none for the service's own user).`},
		c.describe)
}

// File is a file put into a box before its command runs.
type File struct {
	Path    string `json:"path" jsonschema:"where in the box: absolute under /box or /tmp, or relative to /box"`
	Content string `json:"content" jsonschema:"the file's content: text, or base64 when encoding is base64"`
	// Encoding is "text" (the default) or "base64".
	Encoding   string `json:"encoding,omitempty" jsonschema:"text (default) or base64"`
	Executable bool   `json:"executable,omitempty" jsonschema:"make the file executable"`
}

// Limits are what a call may ask for its program.
type Limits struct {
	TimeLimitSeconds float64 `json:"time_limit_seconds,omitempty" jsonschema:"CPU time of the whole program, in seconds (default: none)"`
	WallTimeSeconds  float64 `json:"wall_time_seconds,omitempty" jsonschema:"wall-clock limit, in seconds (default 60, or 2 x time_limit_seconds + 1)"`
	MemoryMB         int64   `json:"memory_mb,omitempty" jsonschema:"memory of the whole program in MiB, page cache and /tmp included (default 512)"`
}

// spec fills the limits into a run's spec.
func (l Limits) spec(sp *api.Spec) error {
	var err error
	if sp.CPUTimeMs, err = seconds("time_limit_seconds", l.TimeLimitSeconds); err != nil {
		return err
	}
	if sp.WallTimeMs, err = seconds("wall_time_seconds", l.WallTimeSeconds); err != nil {
		return err
	}
	if l.MemoryMB < 0 || l.MemoryMB > 1<<20 {
		return fmt.Errorf("memory_mb: %d is out of range (1 to 1048576)", l.MemoryMB)
	}
	sp.MemoryBytes = l.MemoryMB << 20
	sp.OutputLimitBytes = headBytes
	return nil
}

// seconds is a limit in seconds as the API's milliseconds (0: the
// default).
func seconds(field string, s float64) (int64, error) {
	if s != s || s < 0 || s > 86400 {
		return 0, fmt.Errorf("%s: %v is out of range (0 to 86400 seconds)", field, s)
	}
	return int64(s * 1000), nil
}

// RunCodeInput is run_code's arguments.
type RunCodeInput struct {
	Language string   `json:"language" jsonschema:"the language: python, c, cpp, go, java, javascript or rust (describe_sandbox lists those built here)"`
	Code     string   `json:"code" jsonschema:"the whole source file"`
	Stdin    string   `json:"stdin,omitempty" jsonschema:"the program's standard input (default: empty)"`
	Args     []string `json:"args,omitempty" jsonschema:"arguments of the program"`
	Limits
}

func (c *conn) runCode(ctx context.Context, _ *sdk.CallToolRequest, in RunCodeInput) (*sdk.CallToolResult, *RunResult, error) {
	req := server.ExecRequest{Source: in.Code}
	req.Lang, req.Args = in.Language, in.Args
	if in.Stdin != "" {
		req.Stdin = &server.Input{Text: &in.Stdin}
	}
	if err := in.Limits.spec(&req.Spec); err != nil {
		return nil, nil, err
	}
	var out outputs
	var rep *api.ExecReport
	err := stream(ctx, c.api, "/v1/exec", &req, func(ev *server.Event) error {
		switch {
		case ev.Error != "":
			return errors.New(ev.Error)
		case ev.Exec != nil:
			rep = ev.Exec
		default:
			out.add(ev.Stream, ev.Data)
		}
		return nil
	})
	if err == nil && rep == nil {
		err = errNoAnswer
	}
	if err != nil {
		return nil, nil, toolError(err)
	}
	res := execResult(rep, &out, in.Language)
	return res.toolResult(), res, nil
}

// RunCommandInput is run_command's arguments.
type RunCommandInput struct {
	Command  string `json:"command" jsonschema:"a shell command line, run as /bin/sh -c COMMAND in /box"`
	Language string `json:"language,omitempty" jsonschema:"run on this language's image (its compilers and runtime) instead of the host's programs"`
	Stdin    string `json:"stdin,omitempty" jsonschema:"the command's standard input (default: empty)"`
	Files    []File `json:"files,omitempty" jsonschema:"files written into the box before the command runs"`
	Limits
}

func (c *conn) runCommand(ctx context.Context, _ *sdk.CallToolRequest, in RunCommandInput) (*sdk.CallToolResult, *RunResult, error) {
	cmd := server.Command{}
	cmd.Args, cmd.Lang = []string{"/bin/sh", "-c", in.Command}, in.Language
	if in.Stdin != "" {
		cmd.Stdin = &server.Input{Text: &in.Stdin}
	}
	if err := in.Limits.spec(&cmd.Spec); err != nil {
		return nil, nil, err
	}
	for i, f := range in.Files {
		ci, err := f.copyIn(fmt.Sprintf("files[%d]", i))
		if err != nil {
			return nil, nil, err
		}
		cmd.CopyIn = append(cmd.CopyIn, ci)
	}
	var out outputs
	var rep *api.Report
	err := stream(ctx, c.api, "/v1/run", &server.RunRequest{Commands: []server.Command{cmd}}, func(ev *server.Event) error {
		switch {
		case ev.Error != "":
			return errors.New(ev.Error)
		case ev.Result != nil:
			rep = ev.Result.Report
		default:
			out.add(ev.Stream, ev.Data)
		}
		return nil
	})
	if err == nil && rep == nil {
		err = errNoAnswer
	}
	if err != nil {
		return nil, nil, toolError(err, "commands[0].copy_in", "files", "commands[0].", "")
	}
	res := runResult(rep, &out, "")
	return res.toolResult(), res, nil
}

// copyIn is f as a run's copy_in (field names it in errors).
func (f File) copyIn(field string) (server.CopyIn, error) {
	ci := server.CopyIn{Path: boxPath(f.Path)}
	switch f.Encoding {
	case "", "text":
		ci.Text = &f.Content
	case "base64":
		b, err := decodeBase64(f.Content)
		if err != nil {
			return ci, fmt.Errorf("%s.content: not base64: %v", field, err)
		}
		ci.Base64 = &b
	default:
		return ci, fmt.Errorf("%s.encoding: %q is neither text nor base64", field, f.Encoding)
	}
	if f.Executable {
		ci.Mode = 0o755
	}
	return ci, nil
}

// boxPath makes a path relative to /box absolute.
func boxPath(p string) string {
	if p == "" || p[0] == '/' {
		return p
	}
	return "/box/" + p
}

// toolError is err as a tool's failure; an API error names its field as
// the tool's arguments name it (renames are pairs of the API's prefix and
// the tool's, e.g. "commands[0].copy_in", "files").
func toolError(err error, renames ...string) error {
	var ae *APIError
	if !errors.As(err, &ae) {
		return err
	}
	msg := strings.NewReplacer(renames...).Replace(ae.Message)
	switch ae.Status {
	case http.StatusTooManyRequests:
		return fmt.Errorf("the sandbox is busy (%s): try again shortly", msg)
	case http.StatusNotFound:
		return fmt.Errorf("%s", msg)
	}
	return errors.New(msg)
}

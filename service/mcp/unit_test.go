package mcp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/isolate-sandbox/isolate/api"
)

func TestPythonError(t *testing.T) {
	for _, tc := range []struct {
		stderr, name, value string
	}{
		{"Traceback (most recent call last):\n  File \"/box/main.py\", line 1, in <module>\n    1/0\nZeroDivisionError: division by zero\n", "ZeroDivisionError", "division by zero"},
		{"  File \"/box/main.py\", line 1\n    def (\n        ^\nSyntaxError: invalid syntax\n", "SyntaxError", "invalid syntax"},
		{"Traceback (most recent call last):\n  File \"x\", line 1, in <module>\nKeyboardInterrupt\n", "KeyboardInterrupt", ""},
		{"segfault somewhere\n", "", ""},
		{"", "", ""},
	} {
		e := pythonError(tc.stderr)
		switch {
		case tc.name == "" && e != nil:
			t.Errorf("%q: no exception expected, got %+v", tc.stderr, e)
		case tc.name != "" && (e == nil || e.Name != tc.name || e.Value != tc.value):
			t.Errorf("%q: got %+v, want %s: %s", tc.stderr, e, tc.name, tc.value)
		}
	}
}

func TestRunResult(t *testing.T) {
	rep := &api.Report{Status: api.StatusTO, Limit: "wall", ExitCode: 0, Stdout: "head only", StdoutTruncated: true}
	var out outputs
	out.add("stderr", "oops\n")
	res := runResult(rep, &out, "")
	if res.Stdout != "head only" || !res.StdoutTruncated || res.Stderr != "oops\n" {
		t.Errorf("streams: %+v", res)
	}
	if res.Error == nil || res.Error.Name != "TimeLimitExceeded" || !strings.Contains(res.Error.Value, "wall") {
		t.Errorf("error: %+v", res.Error)
	}
	tr := res.toolResult()
	if !tr.IsError || !strings.Contains(tr.Content[0].(*sdk.TextContent).Text, "wall limit reached") {
		t.Errorf("tool result: %+v", tr)
	}
	ok := runResult(&api.Report{Status: api.StatusOK}, &outputs{}, "python").toolResult()
	if ok.IsError {
		t.Error("an OK run is an error")
	}
}

func TestToolError(t *testing.T) {
	err := toolError(&APIError{Status: 400, Message: "commands[0].copy_in[2].path: outside the box"}, "commands[0].copy_in", "files", "commands[0].", "")
	if err.Error() != "files[2].path: outside the box" {
		t.Errorf("renamed: %q", err)
	}
	err = toolError(&APIError{Status: 429, Message: "the queue is full"})
	if !strings.Contains(err.Error(), "busy") {
		t.Errorf("429: %q", err)
	}
	plain := errors.New("x")
	if toolError(plain) != plain {
		t.Error("an error that is not the API's changed")
	}
}

// fakeAPI answers every request with one status and body.
type fakeAPI struct {
	status int
	body   string
}

func (f fakeAPI) Do(context.Context, string, string, io.Reader, http.Header) (*http.Response, error) {
	return &http.Response{StatusCode: f.status, Body: io.NopCloser(strings.NewReader(f.body)), Header: http.Header{}}, nil
}

// An MCP session over HTTP is its opener's: another caller's request
// that names it answers 404, as for an unknown session.
func TestHTTPSessionOwner(t *testing.T) {
	h := HTTPHandler(func(r *http.Request) string { return r.Header.Get("X-Who") },
		func(*http.Request) API { return fakeAPI{status: 200, body: `{"images":["python"]}`} })
	ts := httptest.NewServer(h)
	defer ts.Close()
	post := func(who, session, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
		req.Header.Set("X-Who", who)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("alice", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, id)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if resp := post("mallory", id, list); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another caller's request for the session: %d, want 404", resp.StatusCode)
	}
	resp = post("alice", id, list)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "run_code") {
		t.Errorf("the opener's own request: %d %s", resp.StatusCode, b)
	}
}

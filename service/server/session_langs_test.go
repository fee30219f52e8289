package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// A session's code contexts speak JavaScript and Bash beside Python: the
// default context of each language keeps its state, an exception and a
// timeout answer as Python's do, and the health answer lists the
// languages.
func TestSessionCodeLanguages(t *testing.T) {
	s := startService(t, nil)
	status, b := s.do(t, "GET", "/v1/health", "")
	var h Health
	if json.Unmarshal(b, &h); !slices.Equal(h.CodeLanguages, []string{"python", "javascript", "bash"}) {
		t.Errorf("health: %d %s", status, b)
	}
	id := s.session(t, `{"lang": "javascript"}`)
	code := func(body string) CodeAnswer {
		t.Helper()
		status, b := s.do(t, "POST", "/v1/sessions/"+id+"/code", body)
		var a CodeAnswer
		if err := json.Unmarshal(b, &a); err != nil || status != 200 {
			t.Fatalf("%s: %d %s", body, status, b)
		}
		return a
	}
	js := code(`{"code": "const n = 6", "language": "javascript"}`)
	if a := code(`{"code": "console.log('hi'); n * 7", "language": "js"}`); a.Result == nil || *a.Result != "42" || a.Stdout != "hi\n" || a.Context != js.Context || a.ExecutionCount != 2 {
		t.Fatalf("n * 7: %+v", a)
	}
	if a := code(`{"code": "null.x", "language": "javascript"}`); a.Error == nil || a.Error.Name != "TypeError" {
		t.Fatalf("null.x: %+v", a)
	}
	if a := code(`{"code": "while (true) {}", "language": "javascript", "timeout_ms": 300}`); a.Error == nil || a.Error.Name != "Interrupted" {
		t.Fatalf("a loop past timeout_ms: %+v", a)
	}
	// Bash's default context is another one, with its own state.
	sh := code(`{"code": "V=1; cd /tmp", "language": "bash"}`)
	if a := code(`{"code": "echo $V; pwd; node -e 'console.log(1+1)'", "language": "bash"}`); a.Stdout != "1\n/tmp\n2\n" || a.Context != sh.Context || sh.Context == js.Context {
		t.Fatalf("bash: %+v (javascript's context %s)", a, js.Context)
	}
	if a := code(`{"code": "exit 0 | false", "language": "bash"}`); a.Error == nil || a.Error.Name != "ExitStatus" {
		t.Fatalf("a failing command: %+v", a)
	}
	// A context of its own says its language, in the session's description too.
	status, b = s.do(t, "POST", "/v1/sessions/"+id+"/contexts", `{"language": "bash"}`)
	var ctx ContextState
	if json.Unmarshal(b, &ctx); status != 201 || ctx.Language != "bash" {
		t.Fatalf("new context: %d %s", status, b)
	}
	if a := code(`{"code": "echo ${V-none}", "context": "` + ctx.ID + `"}`); a.Stdout != "none\n" {
		t.Fatalf("a fresh bash context: %+v", a)
	}
	status, b = s.do(t, "GET", "/v1/sessions/"+id, "")
	if !strings.Contains(string(b), `{"id":"`+ctx.ID+`","language":"bash"`) || !strings.Contains(string(b), `"language":"javascript"`) {
		t.Errorf("the session's contexts: %d %s", status, b)
	}
	for path, body := range map[string]string{"/contexts": `{"language": "cobol"}`, "/code": `{"code": "1", "language": "cobol"}`} {
		status, b := s.do(t, "POST", "/v1/sessions/"+id+path, body)
		var e errorBody
		if json.Unmarshal(b, &e); status != http.StatusBadRequest || e.Field != "language" {
			t.Errorf("%s %s: %d %s", path, body, status, b)
		}
	}
}

// Rich results: in the answer, and streamed as result lines before the
// execution.
func TestSessionCodeResults(t *testing.T) {
	s := startService(t, nil)
	id := s.session(t, `{}`)
	const code = `{"code": "class H:\n    def _repr_html_(self): return '<b>h</b>'\n    def __repr__(self): return 'H()'\ndisplay(H())\nH()"`
	status, b := s.do(t, "POST", "/v1/sessions/"+id+"/code", code+`}`)
	var a CodeAnswer
	if json.Unmarshal(b, &a); status != 200 || len(a.Results) != 2 || a.Results[0].HTML != "<b>h</b>" || a.Results[0].IsMainResult || !a.Results[1].IsMainResult || a.Results[1].Text != "H()" {
		t.Fatalf("%d %s", status, b)
	}
	status, b = s.do(t, "POST", "/v1/sessions/"+id+"/code", code+`, "stream": true}`)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if status != 200 || len(lines) != 3 || lines[0] != `{"type":"result","text":"H()","html":"<b>h</b>"}` ||
		!strings.HasPrefix(lines[2], `{"type":"execution","result":"H()","results":[`) {
		t.Fatalf("streamed: %d %s", status, b)
	}
	// None without a value to show.
	if status, b := s.do(t, "POST", "/v1/sessions/"+id+"/code", `{"code": "x = 1"}`); status != 200 || strings.Contains(string(b), `"results"`) {
		t.Errorf("no results: %d %s", status, b)
	}
}

package server

import (
	"encoding/json"
	"net/http"
	"testing"
)

// A call's env and cwd hold for that call only: the code and what it
// starts see them, and the next call sees the context as it was.
func TestSessionCodeCallOptions(t *testing.T) {
	s := startService(t, nil)
	id := s.session(t, `{"env": ["KEEP=session"]}`)
	code := func(body string) (int, CodeAnswer, errorBody) {
		t.Helper()
		status, b := s.do(t, "POST", "/v1/sessions/"+id+"/code", body)
		var a CodeAnswer
		var e errorBody
		json.Unmarshal(b, &a)
		json.Unmarshal(b, &e)
		return status, a, e
	}
	const look = `import os, subprocess\n(os.environ.get('A'), os.environ.get('KEEP'), os.getcwd(), subprocess.run(['sh', '-c', 'echo $A; pwd'], capture_output=True, text=True).stdout)`
	if status, a, _ := code(`{"code": "` + look + `", "env": ["A=1", "KEEP=call"], "cwd": "/tmp"}`); status != http.StatusOK || a.Error != nil ||
		a.Result == nil || *a.Result != `('1', 'call', '/tmp', '1\n/tmp\n')` {
		t.Errorf("with options: %d %+v", status, a)
	}
	if status, a, _ := code(`{"code": "` + look + `"}`); status != http.StatusOK || a.Result == nil || *a.Result != `(None, 'session', '/box', '\n/box\n')` {
		t.Errorf("the next call: %d %+v", status, a)
	}
	// A cwd that is not there is the code's error; the context lives on.
	if status, a, _ := code(`{"code": "1", "cwd": "/nonexistent"}`); status != http.StatusOK || a.Error == nil || a.Error.Name != "FileNotFoundError" {
		t.Errorf("a missing cwd: %d %+v", status, a)
	}
	for body, field := range map[string]string{
		`{"code": "1", "env": ["novalue"]}`: "env[0]",
		`{"code": "1", "cwd": "box"}`:       "cwd",
	} {
		if status, _, e := code(body); status != http.StatusBadRequest || e.Field != field {
			t.Errorf("%s: %d %+v, want 400 naming %s", body, status, e, field)
		}
	}
}

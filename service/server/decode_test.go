package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
)

// Decoding names the field at fault; no root needed.
func TestDecodeFieldPaths(t *testing.T) {
	for _, tc := range []struct{ body, field string }{
		{`{"commands":[{"args":["x"],"stdin":{"txt":"x"}}]}`, "commands[0].stdin.txt"},
		{`{"commands":[{"args":["x"]},{"args":["y"],"copy_out":[{"path":"/box/a","inline":1}]}]}`, "commands[1].copy_out[0].inline"},
		{`{"commands":[{"args":["x"],"binds":[{"host":"/a","box":"/b","ro":true}]}]}`, "commands[0].binds[0].ro"},
		{`{"commands":[{"args":"x"}]}`, "commands[0].args"},
		{`{"commands":[{"args":["x"],"pids":1.5}]}`, "commands[0].pids"},
		{`{"commands":[{"args":["x"],"stdin":{"base64":"!!"}}]}`, "(body)"},
		{`{"commands":[{"args":["x"]}],"pipes":[{"from":{"cmd":0,"fd":1,"x":1}}]}`, "pipes[0].from.x"},
		{`[1]`, "(body)"},
		{`{"commands":`, "(body)"},
		{`{"commands":[]}x`, "(body)"},
	} {
		var req RunRequest
		err := decode(strings.NewReader(tc.body), &req, DefaultMaxBodyBytes, 4)
		var fe *api.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want the field %s", tc.body, err, tc.field)
		}
	}
	var req RunRequest
	if err := decode(strings.NewReader(`{"commands":[{"args":["/bin/true"]}]}`), &req, DefaultMaxBodyBytes, 4); err != nil || len(req.Commands) != 1 {
		t.Fatalf("the minimal request: %v", err)
	}
}

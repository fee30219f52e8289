package codecontext

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/isolate-sandbox/isolate/api"
)

// CallOptions are what one run of a code context changes for that call
// only: variables added to the interpreter's environment (os.environ,
// which the processes it starts inherit) and its working directory. The
// driver puts both back as they were once the call ends, what the code
// itself changed of them included.
type CallOptions struct {
	Env []string // NAME=VALUE
	Cwd string   // absolute, in the box
}

// Check refuses a malformed option, naming its field.
func (o CallOptions) Check() error {
	for i, kv := range o.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t\x00") {
			return &api.FieldError{Field: fmt.Sprintf("env[%d]", i), Msg: fmt.Sprintf("%q: expected NAME=VALUE", kv)}
		}
	}
	if o.Cwd != "" && !path.IsAbs(o.Cwd) {
		return &api.FieldError{Field: "cwd", Msg: fmt.Sprintf("%q: must be an absolute path inside the box", o.Cwd)}
	}
	return nil
}

type callOptionsKey struct{}

// WithCallOptions is ctx carrying o to the CodeContext.Run it is given.
func WithCallOptions(ctx context.Context, o CallOptions) context.Context {
	if len(o.Env) == 0 && o.Cwd == "" {
		return ctx
	}
	return context.WithValue(ctx, callOptionsKey{}, o)
}

// withCallOptions adds the call options ctx carries, if any, to the
// driver's request req (a JSON object): "env" as an object of names and
// values, "cwd".
func withCallOptions(ctx context.Context, req []byte) ([]byte, error) {
	o, ok := ctx.Value(callOptionsKey{}).(CallOptions)
	if !ok {
		return req, nil
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(req, &m); err != nil {
		return nil, err
	}
	if len(o.Env) > 0 {
		env := map[string]string{}
		for _, kv := range o.Env {
			name, value, _ := strings.Cut(kv, "=")
			env[name] = value
		}
		m["env"] = env
	}
	if o.Cwd != "" {
		m["cwd"] = o.Cwd
	}
	return json.Marshal(m)
}

package codecontext

import (
	"context"
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

// driverRequest is one call as a driver reads it (Bash's driver in its
// own form: bashRequest).
type driverRequest struct {
	Code   string            `json:"code"`
	Limit  int64             `json:"limit"`
	Nonce  string            `json:"nonce"`
	Stream bool              `json:"stream"`
	Env    map[string]string `json:"env,omitempty"`
	Cwd    string            `json:"cwd,omitempty"`
}

// withCallOptions adds the call options ctx carries, if any, to r: the
// environment as names and values, the working directory.
func (r *driverRequest) withCallOptions(ctx context.Context) error {
	o, ok := ctx.Value(callOptionsKey{}).(CallOptions)
	if !ok {
		return nil
	}
	if err := o.Check(); err != nil {
		return err
	}
	if len(o.Env) > 0 {
		r.Env = make(map[string]string, len(o.Env))
		for _, kv := range o.Env {
			name, value, _ := strings.Cut(kv, "=")
			r.Env[name] = value
		}
	}
	r.Cwd = o.Cwd
	return nil
}

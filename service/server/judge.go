package server

import (
	"context"
	"os"
	"path/filepath"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/langs/judge"
)

// Judge is /v1/exec over the judge package's compile+run, as `isolate
// exec` does it.
type Judge struct{ Host *isolate.Host }

// Exec compiles and runs req's source.
func (j Judge) Exec(ctx context.Context, req *ExecRequest, stdio isolate.IO) (*api.ExecReport, error) {
	// The judge takes the source as a file: one of the request's own, in
	// a directory only root may enter; the judge copies it into the box.
	dir, err := newWorkDir("exec-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "source")
	if err := os.WriteFile(src, []byte(req.Source), 0o600); err != nil {
		return nil, err
	}
	spec := req.Spec
	args := spec.Args
	spec.Args = nil
	job, err := judge.New(j.Host, &spec, src, args)
	if err != nil {
		return nil, asUsage(err)
	}
	if req.Caps != nil {
		job.CapCompile(*req.Caps)
	}
	return job.Run(ctx, stdio)
}

// asUsage marks the judge's plain errors about the request (an unknown
// language, bad limits) as the client's: a 400.
func asUsage(err error) error {
	switch err.(type) {
	case *api.FieldError, *api.UsageError:
		return err
	}
	return &api.UsageError{Msg: err.Error()}
}

package main

import (
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/server"
)

// newExecer is the compile+run behind /v1/exec.
// TODO(svc): the judge package (branch lib, milestone 2).
func newExecer(*isolate.Host) server.Execer { return nil }

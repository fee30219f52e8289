package isolate

import "github.com/isolate-sandbox/isolate/api"

// The report and its statuses are the contract's, defined in package api
// (pure Go) so that clients need not link the runtime.
type (
	Report      = api.Report
	Status      = api.Status
	SandboxInfo = api.SandboxInfo
	UsageError  = api.UsageError
	StepError   = api.StepError
)

const (
	StatusOK    = api.StatusOK
	StatusRE    = api.StatusRE
	StatusSG    = api.StatusSG
	StatusTO    = api.StatusTO
	StatusML    = api.StatusML
	StatusXX    = api.StatusXX
	StatusCE    = api.StatusCE
	LimitCPU    = api.LimitCPU
	LimitWall   = api.LimitWall
	LimitMemory = api.LimitMemory
	LimitNone   = api.LimitNone
)

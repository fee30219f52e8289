// Package isolate is the runtime: one sandboxed run from a Spec to a
// Report.
//
// The supervisor (the isolate command, in the host's namespaces, as root)
// takes a box id and starts init: this same binary, re-executed with
// boxinit.InitArg (or the same C built alone: initexe.go),
// which clones PID 1 into new user, PID, mount, network, IPC and
// UTS namespaces and maps its user namespace, while the supervisor creates
// the box's cgroup. PID 1 builds the box's file system from the supervisor's plan,
// pivots into it and starts the program as an unprivileged user, inside the
// cgroup and under the (precompiled) syscall filter from its first
// instruction.
// The supervisor enforces the CPU and wall limits, captures output, reads
// the kernel's accounting and tears everything down.
//
// # Where things are
//
// One run: host.go (the Host), spec.go, prepare.go, startbox.go,
// supervise.go, teardown.go, verdict.go, account.go, report.go, output.go,
// with supervisor.go holding a run's state; initlink.go, earlyinit.go and
// initexe.go are the supervisor's end of the box's init (package boxinit,
// which holds init itself and the protocol). The concerns that live on
// the supervisor's internals are file sets named by them: session*.go (a
// box that lives across calls; code contexts are package codecontext),
// pool*.go (boxes built ahead), persistent*.go (ioi/isolate's boxes and
// their box root), rootless*.go (runs without root: subordinate ids,
// idmapped binds, delegated cgroups). What root opens on a caller's
// behalf is package hostfs; network allowlists package egress.
package isolate

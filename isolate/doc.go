// Package isolate is the runtime: one sandboxed run from a Spec to a
// Report.
//
// The supervisor (the isolate command, in the host's namespaces, as root)
// takes a box id and starts init: this same binary, re-executed with
// InitArg, which clones PID 1 into new user, PID, mount, network, IPC and
// UTS namespaces and maps its user namespace, while the supervisor creates
// the box's cgroup. PID 1 builds the box's file system from the supervisor's plan,
// pivots into it and starts the program as an unprivileged user, inside the
// cgroup and under the (precompiled) syscall filter from its first
// instruction.
// The supervisor enforces the CPU and wall limits, captures output, reads
// the kernel's accounting and tears everything down.
package isolate

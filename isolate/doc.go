// Package isolate is the runtime: one sandboxed run from a Spec to a
// Report.
//
// The supervisor (the isolate command, in the host's namespaces, as root)
// takes a box id, creates the box's cgroup, compiles the syscall policy and
// starts init: this same binary, re-executed with InitArg as PID 1 of new
// user, PID, mount, network, IPC and UTS namespaces. Init builds the box's
// file system, pivots into it and starts the program as an unprivileged
// user, inside the cgroup and under the filter from its first instruction.
// The supervisor enforces the CPU and wall limits, captures output, reads
// the kernel's accounting and tears everything down.
package isolate

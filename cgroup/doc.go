// Package cgroup owns the control groups of boxes: it finds where this
// process may create them (cgroup v2, v1, or a hybrid of both), creates one
// per run with memory, pids and CPU limits, hands the runtime what it needs to
// place the program inside before its first instruction, reads the kernel's
// accounting back, and removes the group again.
//
// The host's layout comes from github.com/containerd/cgroups/v3. A box's
// directories and limits are made with one mkdir(2) per hierarchy and one
// write(2) per limit, and its accounting is read with one read(2) per file:
// containerd's cgroup1 and cgroup2 managers cost a run more system calls,
// and every start of the isolate binary the package initialisation of their
// protobuf statistics (~0.5 ms of CPU with their code's page faults).
package cgroup

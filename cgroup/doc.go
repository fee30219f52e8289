// Package cgroup owns the control groups of boxes: it finds where this
// process may create them (cgroup v2, v1, or a hybrid of both), creates one
// per run with memory, pids and CPU limits, hands the runtime what it needs to
// place the program inside before its first instruction, reads the kernel's
// accounting back, and removes the group again.
//
// Creation and limits go through github.com/containerd/cgroups/v3; the few
// files read on the hot path (CPU usage while a limit is enforced, peaks at the
// end) are read directly, since one read(2) is all they need.
package cgroup

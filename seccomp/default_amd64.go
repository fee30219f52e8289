package seccomp

import _ "embed"

// precompiled is the default policy's BPF for x86_64, built by BuildDefault
// ahead of time: compiling it with libseccomp costs about 2 ms per run,
// reading it costs nothing. TestPrecompiledDefault fails when policy.go
// changes without regenerating it:
//
//go:generate go test -run TestPrecompiledDefault -update .
//go:embed default_amd64.bpf
var precompiled []byte

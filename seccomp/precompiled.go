//go:build !amd64

package seccomp

// precompiled is the default policy's BPF built ahead of time for this
// architecture; none here, so Compile builds it with libseccomp.
var precompiled []byte

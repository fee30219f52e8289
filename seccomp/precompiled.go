package seccomp

// precompiled is the default policy's BPF built ahead of time for this
// architecture (nil: Compile builds it with libseccomp).
var precompiled []byte

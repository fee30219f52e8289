// Package handover is the service's end of the one-shot CLI's handover:
// a run of `isolate run`, `isolate exec` or the ioi form's `--run` that
// the CLI (cmd/isolate/handover.c: from the binary's entry point, before
// the C library and the Go runtime start; off x86-64 from an ELF
// constructor) hands to a running service, which runs it in its own Go
// process with the caller's descriptors and rights. It is transport only:
// what a handed-over invocation does is the Runner's.
//
// The conversation on one unix stream connection (protocol.h; integers in
// the machine's byte order, both ends being one build on one machine):
//
//	client  request: u32 magic, u32 length of the body; the body is
//	        u32 argc, u32 envc, then NUL-terminated strings: the build id
//	        of the client's binary, its working directory, its CPU
//	        affinity (the cpu_set_t's bytes in hex, trailing zeros left
//	        out), its umask (%04o), argv, environ.
//	        Attached to its first byte (SCM_RIGHTS): fds 0, 1, 2 and an
//	        O_PATH descriptor of the working directory.
//	service answer: {u32 tag, i32 a, i32 b}. DECLINED (a bytes of reason
//	        follow, then the connection closes): nothing happened, the
//	        client runs the invocation itself. The service declines a
//	        different build, a caller whose CPU affinity or umask differs
//	        from its own (the program inherits the caller's affinity, the
//	        files a run creates get the caller's umask: such callers keep
//	        both in-process), and anything while it stops. ACCEPTED: the
//	        run is the service's.
//	client  after ACCEPTED: one byte per signal the CLI got (TERM, INT,
//	        HUP, QUIT, ABRT), which the Runner sees as the CLI would.
//	service EXIT {code, signal}: the CLI exits with code, or dies of
//	        signal.
//
// The caller is who the kernel says is at the other end (SO_PEERCRED and
// SO_PEERGROUPS, recorded when it connected). The connection closing before EXIT means the caller died (or
// was killed): the run's context is cancelled and its box killed.
package handover

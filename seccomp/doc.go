// Package seccomp owns the box's syscall policy: it compiles the built-in
// default allow-list, or an OCI/Docker JSON profile, into classic BPF in the
// supervisor (with libseccomp and libcontainer's profile conversion) for
// the box's init to load right before the program's execve (Install does
// the same for a Go caller), and records which syscalls the policy refused
// through a seccomp user-notification listener.
//
// Refused calls fail with EPERM and are named in the report; syscalls newer
// than the policy fail with ENOSYS so that runtimes fall back (clone3 to
// clone, and so on); the 32-bit x86 and x32 ABIs kill the process.
package seccomp

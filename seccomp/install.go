package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install loads filter on the calling thread only, for a Go process that
// starts the program itself: call it on a thread locked with
// runtime.LockOSThread, right before that thread forks (the child inherits
// the filter). Raw syscalls only (no cgo), no TSYNC, so the process's other
// threads stay unfiltered. It sets PR_SET_NO_NEW_PRIVS on the thread
// (seccomp requires it of a task without CAP_SYS_ADMIN, and the program must
// never gain privileges through a set-id binary anyway). The box's init,
// written in C, does the same in the forked program itself
// (isolate/boxinit/init_proc.c).
//
// When notify is true the filter is loaded with
// SECCOMP_FILTER_FLAG_NEW_LISTENER and the listener's descriptor (close-on-
// exec) is returned; otherwise -1. Hand it to a Recorder and close this
// copy: the kernel detaches a listener only when its last descriptor is
// closed, which is what makes the Recorder's cap work.
//
// With the listener goes SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV where the
// kernel has it (5.19): a refused call the Recorder has received can then
// be interrupted only by a fatal signal. Otherwise a signal arriving as the
// answer goes out makes the kernel drop the answer and restart the call,
// which is notified and answered again: counted twice, and the cap reached
// a call early.
func Install(filter []byte, notify bool) (listenerFD int, err error) {
	n := len(filter) / 8
	if n == 0 || len(filter)%8 != 0 {
		return -1, errors.New("seccomp: empty or truncated BPF program")
	}
	if n > maxInsns {
		return -1, fmt.Errorf("seccomp: %d instructions, more than the kernel's %d", n, maxInsns)
	}
	// A properly aligned copy: the kernel copies it in, but Go may not
	// point a *SockFilter at arbitrary (e.g. embedded) bytes.
	insns := make([]unix.SockFilter, n)
	for i := range insns {
		b := filter[8*i:]
		insns[i] = unix.SockFilter{
			Code: binary.NativeEndian.Uint16(b),
			Jt:   b[2],
			Jf:   b[3],
			K:    binary.NativeEndian.Uint32(b[4:]),
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("seccomp: PR_SET_NO_NEW_PRIVS: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(n), Filter: &insns[0]}
	var flags uintptr
	if notify {
		flags |= unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
	}
	r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	if errno == unix.EINVAL && notify {
		// Before Linux 5.19: no killable wait.
		flags &^= unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
		r, _, errno = unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	}
	runtime.KeepAlive(insns)
	if errno != 0 {
		return -1, fmt.Errorf("seccomp: SECCOMP_SET_MODE_FILTER: %w", errno)
	}
	if !notify {
		return -1, nil
	}
	return int(r), nil
}

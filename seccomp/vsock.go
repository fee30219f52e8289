package seccomp

import (
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The vsock guard: socket(2) and socketpair(2) of AF_VSOCK fail with
// EAFNOSUPPORT, whatever the policy. A box's network namespace does not
// cover vsock: on a virtual machine with a vsock device, such a socket
// reaches the hypervisor's host (CID 2) and its services. The default
// policy refuses every family but unix and IP already; the guard goes in
// front of a profile's program, and is the whole of "none"'s, which
// otherwise filters nothing.

// vsockGuard is the guard's instructions for the audit architecture
// arch: a call it does not refuse falls through to the next instruction
// (other architectures, every other call).
func vsockGuard(arch uint32) []byte {
	const end = 8
	skip := func(from, to int) uint8 { return uint8(to - from - 1) }
	prog := []bpf.Instruction{
		0: bpf.LoadAbsolute{Off: offArch, Size: 4},
		1: bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: arch, SkipTrue: skip(1, end)},
		2: bpf.LoadAbsolute{Off: offNr, Size: 4},
		3: bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_SOCKET, SkipTrue: skip(3, 5)},
		4: bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_SOCKETPAIR, SkipFalse: skip(4, end)},
		5: bpf.LoadAbsolute{Off: argLow(0), Size: 4},
		6: bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_VSOCK, SkipFalse: skip(6, end)},
		7: bpf.RetConstant{Val: retErrno | uint32(unix.EAFNOSUPPORT)},
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		panic("seccomp: the vsock guard: " + err.Error())
	}
	return encode(raw)
}

// guardNone is "none"'s program: the guard, then allow.
func guardNone(arch uint32) []byte {
	raw, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: retAllow}})
	if err != nil {
		panic("seccomp: " + err.Error())
	}
	return append(vsockGuard(arch), encode(raw)...)
}

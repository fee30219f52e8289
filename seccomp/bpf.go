package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Return values of a seccomp filter (linux/seccomp.h).
const (
	retKillProcess = unix.SECCOMP_RET_KILL_PROCESS
	retErrno       = unix.SECCOMP_RET_ERRNO
	retUserNotif   = unix.SECCOMP_RET_USER_NOTIF
	retAllow       = unix.SECCOMP_RET_ALLOW
	retActionFull  = unix.SECCOMP_RET_ACTION_FULL
)

// x32Bit marks x32 syscall numbers on x86_64.
const x32Bit = 0x40000000

// maxInsns is the kernel's limit on a filter's length (BPF_MAXINSNS).
const maxInsns = 4096

// exportBPF returns libseccomp's compiled program. libseccomp 2.5 can only
// write it to a file descriptor: a memfd, so that no size can block.
func exportBPF(f *libseccomp.ScmpFilter) ([]byte, error) {
	fd, err := unix.MemfdCreate("seccomp-bpf", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	file := os.NewFile(uintptr(fd), "seccomp-bpf")
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("export BPF: %w", err)
	}
	size, err := file.Seek(0, 1)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	if _, err := file.ReadAt(buf, 0); err != nil {
		return nil, fmt.Errorf("read exported BPF: %w", err)
	}
	return buf, nil
}

// prologue is a hand-written head put before libseccomp's program for
// what libseccomp cannot say. For the native architecture only (other
// architectures fall through to libseccomp's program unchanged):
//   - ioctlNr/ioctls: ioctl requests (low 32 bits, which is all the kernel
//     reads) answered with refuse;
//   - horizon: syscall numbers above it (x32 numbers excepted: libseccomp
//     kills those) fail with ENOSYS. 0 means no horizon.
type prologue struct {
	arch    uint32
	ioctlNr uint32
	ioctls  []uint32
	refuse  uint32
	horizon uint32
}

// seccomp_data offsets.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// argLow is the offset of argument i's low 32 bits: first on a
// little-endian machine, second on a big-endian one.
func argLow(i int) uint32 {
	off := uint32(offArgs + 8*i)
	var probe [2]byte
	binary.NativeEndian.PutUint16(probe[:], 1)
	if probe[0] == 0 {
		off += 4
	}
	return off
}

// assemble builds the prologue. Its layout, with every jump forward:
//
//	ld [arch]; jne native -> END; ld [nr]
//	jeq ioctl -> IOCTL                          (if ioctls)
//	jgt horizon ? next : END; jge x32 ? END : ENOSYS   (if horizon)
//	ja END
//	IOCTL: ld [args[1] low]; jeq req -> REFUSE ...; ja END
//	REFUSE: ret refuse; ENOSYS: ret errno(ENOSYS)
//	END: (libseccomp's program)
func (p *prologue) assemble() ([]byte, error) {
	if len(p.ioctls) == 0 && p.horizon == 0 {
		return nil, nil
	}
	n := 3
	ioctlJumpAt := -1
	if len(p.ioctls) > 0 {
		ioctlJumpAt = n
		n++
	}
	horizonAt := -1
	if p.horizon > 0 {
		horizonAt = n
		n += 2
	}
	jaEnd := n
	n++
	ioctlAt := n
	if len(p.ioctls) > 0 {
		n += 1 + len(p.ioctls) + 1
	}
	retRefuseAt, retEnosysAt := n, n+1
	end := n + 2
	if end > 255 {
		return nil, errors.New("seccomp prologue too long for 8-bit jumps")
	}
	skip := func(from, to int) uint8 { return uint8(to - from - 1) }
	prog := make([]bpf.Instruction, end)
	prog[0] = bpf.LoadAbsolute{Off: offArch, Size: 4}
	prog[1] = bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: p.arch, SkipTrue: skip(1, end)}
	prog[2] = bpf.LoadAbsolute{Off: offNr, Size: 4}
	if ioctlJumpAt >= 0 {
		prog[ioctlJumpAt] = bpf.JumpIf{Cond: bpf.JumpEqual, Val: p.ioctlNr, SkipTrue: skip(ioctlJumpAt, ioctlAt)}
	}
	if horizonAt >= 0 {
		prog[horizonAt] = bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: p.horizon, SkipFalse: skip(horizonAt, end)}
		prog[horizonAt+1] = bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit,
			SkipTrue: skip(horizonAt+1, end), SkipFalse: skip(horizonAt+1, retEnosysAt)}
	}
	prog[jaEnd] = bpf.Jump{Skip: uint32(end - jaEnd - 1)}
	if len(p.ioctls) > 0 {
		prog[ioctlAt] = bpf.LoadAbsolute{Off: argLow(1), Size: 4}
		for i, req := range p.ioctls {
			at := ioctlAt + 1 + i
			prog[at] = bpf.JumpIf{Cond: bpf.JumpEqual, Val: req, SkipTrue: skip(at, retRefuseAt)}
		}
		at := ioctlAt + 1 + len(p.ioctls)
		prog[at] = bpf.Jump{Skip: uint32(end - at - 1)}
	}
	prog[retRefuseAt] = bpf.RetConstant{Val: p.refuse}
	prog[retEnosysAt] = bpf.RetConstant{Val: retErrno | uint32(unix.ENOSYS)}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	return encode(raw), nil
}

// encode turns instructions into the kernel's struct sock_filter array.
func encode(raw []bpf.RawInstruction) []byte {
	out := make([]byte, 8*len(raw))
	for i, r := range raw {
		binary.NativeEndian.PutUint16(out[8*i:], r.Op)
		out[8*i+2] = r.Jt
		out[8*i+3] = r.Jf
		binary.NativeEndian.PutUint32(out[8*i+4:], r.K)
	}
	return out
}

// decode is encode's inverse.
func decode(b []byte) ([]bpf.RawInstruction, error) {
	if len(b)%8 != 0 {
		return nil, errors.New("BPF program length is not a multiple of 8")
	}
	raw := make([]bpf.RawInstruction, len(b)/8)
	for i := range raw {
		raw[i] = bpf.RawInstruction{
			Op: binary.NativeEndian.Uint16(b[8*i:]),
			Jt: b[8*i+2],
			Jf: b[8*i+3],
			K:  binary.NativeEndian.Uint32(b[8*i+4:]),
		}
	}
	return raw, nil
}

// withoutNotify rewrites every SECCOMP_RET_USER_NOTIF of a program into
// SECCOMP_RET_ERRNO|EPERM: the same policy for a box without a listener.
func withoutNotify(filter []byte) []byte {
	out := append([]byte(nil), filter...)
	for i := 0; i+8 <= len(out); i += 8 {
		op := binary.NativeEndian.Uint16(out[i:])
		k := binary.NativeEndian.Uint32(out[i+4:])
		if op == unix.BPF_RET|unix.BPF_K && k&retActionFull == retUserNotif {
			binary.NativeEndian.PutUint32(out[i+4:], retErrno|uint32(unix.EPERM))
		}
	}
	return out
}

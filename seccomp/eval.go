package seccomp

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// call is the kernel's struct seccomp_data: what a filter sees of a syscall.
type call struct {
	Nr   uint32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

// bytes lays the call out as the kernel does, in native byte order.
func (c *call) bytes() [64]byte {
	var b [64]byte
	binary.NativeEndian.PutUint32(b[0:], c.Nr)
	binary.NativeEndian.PutUint32(b[4:], c.Arch)
	binary.NativeEndian.PutUint64(b[8:], c.IP)
	for i, a := range c.Args {
		binary.NativeEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// eval runs a seccomp cBPF program over one call, with the kernel's
// semantics (the subset seccomp accepts: no packet loads beyond the
// 64 bytes of seccomp_data), and returns the filter's verdict. It lets
// Compile check a profile against what the sandbox itself needs, and the
// tests check a policy over every syscall number without a kernel.
func eval(prog []bpf.RawInstruction, c *call) (uint32, error) {
	data := c.bytes()
	var a, x uint32
	var mem [16]uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		k := in.K
		switch in.Op & 0x07 {
		case unix.BPF_LD, unix.BPF_LDX:
			var v uint32
			switch in.Op & 0xe0 {
			case unix.BPF_ABS:
				if in.Op&0x18 != unix.BPF_W || k%4 != 0 || k+4 > 64 {
					return 0, fmt.Errorf("insn %d: bad load %#x k=%d", pc, in.Op, k)
				}
				v = binary.NativeEndian.Uint32(data[k:])
			case unix.BPF_IMM:
				v = k
			case unix.BPF_MEM:
				if k >= 16 {
					return 0, fmt.Errorf("insn %d: bad scratch slot %d", pc, k)
				}
				v = mem[k]
			case unix.BPF_LEN:
				v = 64
			default:
				return 0, fmt.Errorf("insn %d: unsupported load %#x", pc, in.Op)
			}
			if in.Op&0x07 == unix.BPF_LD {
				a = v
			} else {
				x = v
			}
		case unix.BPF_ST, unix.BPF_STX:
			if k >= 16 {
				return 0, fmt.Errorf("insn %d: bad scratch slot %d", pc, k)
			}
			if in.Op&0x07 == unix.BPF_ST {
				mem[k] = a
			} else {
				mem[k] = x
			}
		case unix.BPF_ALU:
			v := k
			if in.Op&unix.BPF_X != 0 {
				v = x
			}
			switch in.Op & 0xf0 {
			case unix.BPF_ADD:
				a += v
			case unix.BPF_SUB:
				a -= v
			case unix.BPF_MUL:
				a *= v
			case unix.BPF_DIV:
				if v == 0 {
					return 0, nil
				}
				a /= v
			case unix.BPF_MOD:
				if v == 0 {
					return 0, nil
				}
				a %= v
			case unix.BPF_AND:
				a &= v
			case unix.BPF_OR:
				a |= v
			case unix.BPF_XOR:
				a ^= v
			case unix.BPF_LSH:
				a <<= v
			case unix.BPF_RSH:
				a >>= v
			case unix.BPF_NEG:
				a = -a
			default:
				return 0, fmt.Errorf("insn %d: unsupported ALU op %#x", pc, in.Op)
			}
		case unix.BPF_JMP:
			if in.Op&0xf0 == unix.BPF_JA {
				pc += int(k)
				continue
			}
			v := k
			if in.Op&unix.BPF_X != 0 {
				v = x
			}
			var t bool
			switch in.Op & 0xf0 {
			case unix.BPF_JEQ:
				t = a == v
			case unix.BPF_JGT:
				t = a > v
			case unix.BPF_JGE:
				t = a >= v
			case unix.BPF_JSET:
				t = a&v != 0
			default:
				return 0, fmt.Errorf("insn %d: unsupported jump %#x", pc, in.Op)
			}
			if t {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET:
			if in.Op&0x18 == unix.BPF_A {
				return a, nil
			}
			return k, nil
		case unix.BPF_MISC:
			if in.Op&0xf8 == unix.BPF_TAX {
				x = a
			} else {
				a = x
			}
		}
	}
	return 0, fmt.Errorf("program ran off its end")
}

package seccomp

import (
	"fmt"
	"sync"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Program is a compiled syscall policy, ready to hand to the box's init.
type Program struct {
	Name   string // "default", "none", or the profile's path (goes in the report)
	Filter []byte // raw cBPF: the kernel's struct sock_filter array (8 bytes per insn); nil: no filter
	Notify bool   // the filter answers refused syscalls with SECCOMP_RET_USER_NOTIF (so a listener is needed)
}

// WithoutNotify returns the same policy answering refused syscalls with
// EPERM directly instead of through a listener: for a runtime that cannot
// take the listener. Nothing is recorded then.
func (p *Program) WithoutNotify() *Program {
	if !p.Notify {
		return p
	}
	return &Program{Name: p.Name, Filter: withoutNotify(p.Filter)}
}

// Instructions is the filter's length in BPF instructions.
func (p *Program) Instructions() int { return len(p.Filter) / 8 }

// ProfileError is a profile that cannot be used: missing, unreadable,
// malformed, or naming something unknown. Its message names the profile
// and the offending entry.
type ProfileError struct {
	Path  string // the profile
	Entry string // the offending entry, e.g. `syscalls[3].names[1] "fooo"`; empty when the whole file is at fault
	Err   error
}

func (e *ProfileError) Error() string {
	if e.Entry == "" {
		return fmt.Sprintf("seccomp profile %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("seccomp profile %s: %s: %v", e.Path, e.Entry, e.Err)
}

func (e *ProfileError) Unwrap() error { return e.Err }

// None is the "none" policy: nothing refused but vsock sockets (the
// vsock guard, vsock.go).
var None = &Program{Name: "none", Filter: guardNone(nativeAudit())}

// nativeAudit is the native architecture's audit number.
func nativeAudit() uint32 {
	arch, err := libseccomp.GetNativeArch()
	if err != nil {
		return unix.AUDIT_ARCH_X86_64
	}
	return auditArch(arch)
}

var defaultOnce struct {
	sync.Once
	p   *Program
	err error
}

// Compile builds policy "default", "none", or an OCI/Docker JSON profile at
// a path. It runs in the supervisor. The default policy is built once per
// process (and on amd64 comes precompiled in the binary, see
// default_amd64.go); a profile is compiled on every call.
func Compile(policy string) (*Program, error) {
	switch policy {
	case "none":
		return None, nil
	case "default", "":
		defaultOnce.Do(func() { defaultOnce.p, defaultOnce.err = compileDefault() })
		return defaultOnce.p, defaultOnce.err
	}
	return compileProfile(policy)
}

// compileDefault is Compile("default") without the per-process cache: what
// one run pays.
func compileDefault() (*Program, error) {
	filter, err := defaultFilter()
	if err != nil {
		return nil, err
	}
	return &Program{Name: "default", Filter: filter, Notify: true}, nil
}

// defaultFilter returns the default policy's BPF: the precompiled one when
// the binary has it, else a fresh build.
func defaultFilter() ([]byte, error) {
	if precompiled != nil {
		return precompiled, nil
	}
	return BuildDefault()
}

// BuildDefault compiles the default policy with libseccomp for the native
// architecture. It is what default_amd64.bpf was generated from
// (`go generate ./seccomp`); Compile("default") uses that copy instead,
// since building costs about 1 ms.
func BuildDefault() ([]byte, error) {
	arch, err := libseccomp.GetNativeArch()
	if err != nil {
		return nil, err
	}
	f, err := libseccomp.NewFilter(libseccomp.ActNotify)
	if err != nil {
		return nil, fmt.Errorf("new filter: %w", err)
	}
	defer f.Release()
	if err := baseAttributes(f); err != nil {
		return nil, err
	}
	for _, name := range allowed {
		nr, err := libseccomp.GetSyscallFromNameByArch(name, arch)
		if err != nil {
			continue // not a syscall of this architecture (e.g. open on arm64)
		}
		if err := f.AddRule(nr, libseccomp.ActAllow); err != nil {
			return nil, fmt.Errorf("allow %s: %w", name, err)
		}
	}
	for _, r := range conditional {
		nr, err := libseccomp.GetSyscallFromNameByArch(r.Name, arch)
		if err != nil {
			continue
		}
		var conds []libseccomp.ScmpCondition
		for _, c := range r.Conds {
			sc, err := libseccomp.MakeCondition(c.Arg, libseccomp.CompareMaskedEqual, uint64(c.Mask), uint64(c.Value))
			if err != nil {
				return nil, err
			}
			conds = append(conds, sc)
		}
		if err := f.AddRuleConditional(nr, libseccomp.ActAllow, conds); err != nil {
			return nil, fmt.Errorf("allow %s conditionally: %w", r.Name, err)
		}
	}
	prog, err := exportBPF(f)
	if err != nil {
		return nil, err
	}
	head := prologue{arch: auditArch(arch), refuse: retUserNotif, ioctls: refusedIoctls}
	if arch == libseccomp.ArchAMD64 {
		head.horizon = horizon
	}
	if nr, err := libseccomp.GetSyscallFromNameByArch("ioctl", arch); err == nil {
		head.ioctlNr = uint32(nr)
	} else {
		head.ioctls = nil
	}
	pre, err := head.assemble()
	if err != nil {
		return nil, err
	}
	return checkLength(append(pre, prog...))
}

// baseAttributes sets what every filter of ours has: the bad-architecture
// action kills the whole process (the 32-bit x86 and x32 ABIs, and any
// other architecture not added), NoNewPrivs is left to Install, and a
// binary tree keeps long lists cheap to walk.
func baseAttributes(f *libseccomp.ScmpFilter) error {
	if err := f.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		return fmt.Errorf("bad-arch action: %w", err)
	}
	if err := f.SetNoNewPrivsBit(false); err != nil {
		return fmt.Errorf("no_new_privs attribute: %w", err)
	}
	if err := f.SetOptimize(2); err != nil {
		return fmt.Errorf("binary tree optimization: %w", err)
	}
	return nil
}

func checkLength(filter []byte) ([]byte, error) {
	if n := len(filter) / 8; n > maxInsns {
		return nil, fmt.Errorf("filter has %d instructions, the kernel takes at most %d", n, maxInsns)
	}
	return filter, nil
}

// auditArch maps a libseccomp architecture to the AUDIT_ARCH_* value
// a filter sees in seccomp_data.arch.
func auditArch(a libseccomp.ScmpArch) uint32 {
	switch a {
	case libseccomp.ArchAMD64:
		return unix.AUDIT_ARCH_X86_64
	case libseccomp.ArchX86:
		return unix.AUDIT_ARCH_I386
	case libseccomp.ArchARM64:
		return unix.AUDIT_ARCH_AARCH64
	case libseccomp.ArchARM:
		return unix.AUDIT_ARCH_ARM
	case libseccomp.ArchPPC64LE:
		return unix.AUDIT_ARCH_PPC64LE
	case libseccomp.ArchS390X:
		return unix.AUDIT_ARCH_S390X
	case libseccomp.ArchRISCV64:
		return unix.AUDIT_ARCH_RISCV64
	}
	return 0
}

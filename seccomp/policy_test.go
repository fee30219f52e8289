package seccomp

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite default_amd64.bpf from policy.go")

// TestPrecompiledDefault keeps the embedded default policy in step with
// policy.go: byte for byte when this libseccomp builds it the same way,
// else decision for decision over every syscall number and the argument
// values the policy tests.
func TestPrecompiledDefault(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the precompiled policy is x86_64's")
	}
	fresh, err := BuildDefault()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("default_amd64.bpf", fresh, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote default_amd64.bpf: %d instructions", len(fresh)/8)
		return
	}
	if bytes.Equal(fresh, precompiled) {
		return
	}
	a, b := mustDecode(t, precompiled), mustDecode(t, fresh)
	for _, c := range policyCalls() {
		ra, err1 := eval(a, &c)
		rb, err2 := eval(b, &c)
		if err1 != nil || err2 != nil || ra != rb {
			t.Fatalf("default_amd64.bpf is stale (nr %d arch %#x args %x: embedded %#x, policy.go %#x; %v %v): run go generate ./seccomp",
				c.Nr, c.Arch, c.Args, ra, rb, err1, err2)
		}
	}
}

func mustDecode(t testing.TB, b []byte) []bpf.RawInstruction {
	t.Helper()
	p, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// policyCalls are the calls that tell two policies apart: every syscall
// number (and x32 number) on x86_64 and i386, and for the syscalls with
// argument tests, the values around what they test.
func policyCalls() []call {
	var out []call
	for _, arch := range []uint32{unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386, 0} {
		for nr := uint32(0); nr < 1100; nr++ {
			out = append(out, call{Nr: nr, Arch: arch}, call{Nr: nr | x32Bit, Arch: arch})
		}
		out = append(out, call{Nr: 0xffffffff, Arch: arch})
	}
	arg := func(name string, i int, vals ...uint64) {
		nr, err := libseccomp.GetSyscallFromNameByArch(name, libseccomp.ArchAMD64)
		if err != nil {
			panic(err)
		}
		for _, v := range vals {
			for _, hi := range []uint64{0, 1 << 32, 0xffffffff << 32} {
				c := call{Nr: uint32(nr), Arch: unix.AUDIT_ARCH_X86_64}
				c.Args[i] = v | hi
				out = append(out, c)
			}
		}
	}
	var cloneFlags []uint64
	for bit := 0; bit < 32; bit++ {
		cloneFlags = append(cloneFlags, 1<<bit, 1<<bit|unix.CLONE_VM|unix.CLONE_THREAD|uint64(unix.SIGCHLD))
	}
	arg("clone", 0, cloneFlags...)
	arg("personality", 0, 0, 8, 0x20000, 0x20008, 0xffffffff, 0x40000, 0x0400000, 1, 0x20001)
	var families []uint64
	for f := uint64(0); f < 50; f++ {
		families = append(families, f)
	}
	arg("socket", 0, families...)
	arg("socketpair", 0, families...)
	arg("ioctl", 1, 0, unix.TCGETS, unix.TIOCSTI, unix.TIOCLINUX, unix.TIOCSTI-1, unix.TIOCSTI+1, unix.TIOCLINUX+1, 0x80045430)
	return out
}

// verdict evaluates the default policy on one call.
func verdict(t *testing.T, prog []bpf.RawInstruction, arch uint32, name string, args ...uint64) uint32 {
	t.Helper()
	nr, err := libseccomp.GetSyscallFromNameByArch(name, libseccomp.ArchAMD64)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c := call{Nr: uint32(nr), Arch: arch}
	copy(c.Args[:], args)
	r, err := eval(prog, &c)
	if err != nil {
		t.Fatalf("eval %s: %v", name, err)
	}
	return r
}

// neverAllowed is SECURITY.md's never-allowed list: refused whatever the arguments.
var neverAllowed = []string{
	"ptrace", "process_vm_readv", "process_vm_writev",
	"mount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"pivot_root", "chroot", "unshare", "setns", "bpf", "perf_event_open",
	"keyctl", "add_key", "request_key", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"open_by_handle_at", "name_to_handle_at", "reboot", "swapon", "swapoff",
	"syslog", "acct", "quotactl", "quotactl_fd", "settimeofday", "clock_settime", "adjtimex", "clock_adjtime",
}

func TestDefaultPolicyDecisions(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("x86_64 policy")
	}
	prog := mustDecode(t, mustCompile(t, "default").Filter)
	x86 := uint32(unix.AUDIT_ARCH_X86_64)
	for _, name := range neverAllowed {
		if r := verdict(t, prog, x86, name); r != retUserNotif {
			t.Errorf("%s: %s, want notify (refused, recorded)", name, describeRet(r))
		}
	}
	for _, name := range allowed {
		if _, err := libseccomp.GetSyscallFromNameByArch(name, libseccomp.ArchAMD64); err != nil {
			t.Errorf("allowed %q is no x86_64 syscall", name)
			continue
		}
		args := []uint64{0, 0}
		if name == "ioctl" {
			args[1] = unix.TCGETS
		}
		if r := verdict(t, prog, x86, name, args...); r != retAllow {
			t.Errorf("%s: %s, want allow", name, describeRet(r))
		}
	}
	// Everything the kernel knows up to the horizon that is not allowed is
	// refused and recorded; beyond it, ENOSYS.
	conditionalNames := map[string]bool{}
	for _, r := range conditional {
		conditionalNames[r.Name] = true
	}
	for nr := uint32(0); nr < 1100; nr++ {
		c := call{Nr: nr, Arch: x86}
		r, err := eval(prog, &c)
		if err != nil {
			t.Fatal(err)
		}
		name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(libseccomp.ArchAMD64)
		switch {
		case nr > horizon:
			if r != retErrno|uint32(unix.ENOSYS) {
				t.Errorf("syscall %d (beyond the horizon): %s, want ENOSYS", nr, describeRet(r))
			}
		case err != nil: // a hole in the table: refused
			if r != retUserNotif {
				t.Errorf("syscall %d (no such syscall): %s, want notify", nr, describeRet(r))
			}
		case slices.Contains(allowed, name) || conditionalNames[name]:
		default:
			if r != retUserNotif {
				t.Errorf("%s: %s, want notify", name, describeRet(r))
			}
		}
		// The same number through the x32 or i386 ABI kills the process.
		for _, c := range []call{{Nr: nr | x32Bit, Arch: x86}, {Nr: nr, Arch: unix.AUDIT_ARCH_I386}, {Nr: nr, Arch: unix.AUDIT_ARCH_X86_64 ^ 1}} {
			if r, _ := eval(prog, &c); r != retKillProcess {
				t.Fatalf("nr %#x arch %#x: %s, want kill process", c.Nr, c.Arch, describeRet(r))
			}
		}
	}
	cases := []struct {
		name string
		args []uint64
		want uint32
	}{
		{"clone", []uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID}, retAllow},
		{"clone", []uint64{uint64(unix.SIGCHLD)}, retAllow},
		{"clone", []uint64{unix.CLONE_VM | unix.CLONE_VFORK | uint64(unix.SIGCHLD)}, retAllow},
		{"clone", []uint64{1<<32 | uint64(unix.SIGCHLD)}, retAllow}, // high bits: ignored by the kernel
		{"clone", []uint64{unix.CLONE_NEWUSER}, retUserNotif},
		{"clone", []uint64{unix.CLONE_NEWNS | uint64(unix.SIGCHLD)}, retUserNotif},
		{"clone", []uint64{unix.CLONE_NEWPID}, retUserNotif},
		{"clone", []uint64{unix.CLONE_NEWNET}, retUserNotif},
		{"clone", []uint64{unix.CLONE_NEWIPC}, retUserNotif},
		{"clone", []uint64{unix.CLONE_NEWUTS}, retUserNotif},
		{"clone", []uint64{unix.CLONE_NEWCGROUP}, retUserNotif},
		{"clone", []uint64{unix.CLONE_NEWTIME}, retUserNotif},
		{"personality", []uint64{0}, retAllow},
		{"personality", []uint64{0xffffffff}, retAllow},
		{"personality", []uint64{0xffffffffffffffff}, retAllow}, // personality(-1) as an unsigned long
		{"personality", []uint64{8}, retAllow},
		{"personality", []uint64{0x20008}, retAllow},
		{"personality", []uint64{0x0040000}, retUserNotif}, // ADDR_NO_RANDOMIZE
		{"personality", []uint64{0x0400000}, retUserNotif}, // READ_IMPLIES_EXEC
		{"socket", []uint64{unix.AF_UNIX}, retAllow},
		{"socket", []uint64{unix.AF_INET}, retAllow},
		{"socket", []uint64{unix.AF_INET6}, retAllow},
		{"socket", []uint64{0xffffffff00000000 | unix.AF_INET}, retAllow},
		{"socket", []uint64{unix.AF_NETLINK}, retUserNotif},
		{"socket", []uint64{unix.AF_PACKET}, retUserNotif},
		{"socket", []uint64{unix.AF_ALG}, retUserNotif},
		{"socket", []uint64{unix.AF_VSOCK}, retUserNotif},
		{"socket", []uint64{unix.AF_BLUETOOTH}, retUserNotif},
		{"socketpair", []uint64{unix.AF_UNIX}, retAllow},
		{"socketpair", []uint64{unix.AF_INET}, retUserNotif},
		{"ioctl", []uint64{1, unix.TIOCSTI}, retUserNotif},
		{"ioctl", []uint64{1, 0xdead00000000 | unix.TIOCSTI}, retUserNotif},
		{"ioctl", []uint64{1, unix.TIOCLINUX}, retUserNotif},
		{"ioctl", []uint64{1, unix.TIOCGWINSZ}, retAllow},
		{"ioctl", []uint64{1, 0xffffffff80045430}, retAllow}, // a sign-extended request
	}
	for _, c := range cases {
		if r := verdict(t, prog, x86, c.name, c.args...); r != c.want {
			t.Errorf("%s(%#x): %s, want %s", c.name, c.args, describeRet(r), describeRet(c.want))
		}
	}
}

func TestAllowListHasNoDuplicatesOrNeverAllowed(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range allowed {
		if seen[n] {
			t.Errorf("%s listed twice", n)
		}
		seen[n] = true
		if slices.Contains(neverAllowed, n) {
			t.Errorf("%s is never allowed", n)
		}
	}
	t.Logf("allow-list: %d syscalls unconditionally, %d more on conditions", len(allowed), len(distinctConditional()))
}

func distinctConditional() []string {
	var out []string
	for _, r := range conditional {
		if !slices.Contains(out, r.Name) {
			out = append(out, r.Name)
		}
	}
	return out
}

// BenchmarkCompileDefault is what Compile("default") costs a run (a run is
// a process: the per-process cache never hits twice).
func BenchmarkCompileDefault(b *testing.B) {
	for b.Loop() {
		if _, err := compileDefault(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuildDefault is what Compile("default") would cost without the
// precompiled copy: libseccomp building the filter.
func BenchmarkBuildDefault(b *testing.B) {
	for b.Loop() {
		if _, err := BuildDefault(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInstall loads the default filter on a fresh thread per
// iteration (a thread carries every filter ever loaded on it);
// BenchmarkThreadOnly is that thread's own cost, to subtract.
func BenchmarkInstall(b *testing.B) {
	filter := mustCompile(b, "default").WithoutNotify().Filter
	benchThread(b, func() error {
		_, err := Install(filter, false)
		return err
	})
}

func BenchmarkInstallNotify(b *testing.B) {
	filter := mustCompile(b, "default").Filter
	benchThread(b, func() error {
		fd, err := Install(filter, true)
		if err == nil {
			unix.Close(fd)
		}
		return err
	})
}

func BenchmarkThreadOnly(b *testing.B) {
	benchThread(b, func() error { return nil })
}

func benchThread(b *testing.B, f func() error) {
	errc := make(chan error)
	for b.Loop() {
		go func() {
			runtime.LockOSThread() // not unlocked: the thread exits with the goroutine
			errc <- f()
		}()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
}

func ExampleCompile() {
	p, err := Compile("default")
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Name, p.Notify, p.Instructions() > 0)
	// Output: default true true
}

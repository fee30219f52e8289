package seccomp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// The tests load real filters into child processes: the test binary
// re-executes itself with childEnv set, and TestMain runs the child's part
// before m.Run (or the child would run the whole suite again).
const childEnv = "ISOLATE_SECCOMP_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childMain loads the filter named by the environment on a locked thread,
// says "listener N", waits for one byte on stdin when notifying (the parent
// has taken the listener by then), then either makes the listed raw
// syscalls and prints "errno" per call, or execs a program under the filter.
func childMain() int {
	runtime.LockOSThread()
	filter, err := os.ReadFile(os.Getenv("FILTER"))
	if err != nil {
		fmt.Println("error", err)
		return 3
	}
	notify := os.Getenv("NOTIFY") == "1"
	fd, err := Install(filter, notify)
	if err != nil {
		fmt.Println("error", err)
		return 3
	}
	fmt.Printf("listener %d\n", fd)
	if notify {
		// Once the parent holds the listener, drop ours: the kernel
		// detaches the listener only when its last descriptor closes (the
		// box's init must do the same, or the Recorder's cap cannot work).
		var b [1]byte
		os.Stdin.Read(b[:])
		unix.Close(fd)
	}
	if prog := os.Getenv("EXEC"); prog != "" {
		args := strings.Fields(prog)
		err := syscall.Exec(args[0], args, []string{"PATH=/usr/bin:/bin"})
		fmt.Println("exec", err)
		return 4
	}
	for _, c := range strings.Split(os.Getenv("CALLS"), ";") {
		if c == "" {
			continue
		}
		var v [7]uint64
		for i, f := range strings.Split(c, ":") {
			v[i], _ = strconv.ParseUint(f, 0, 64)
		}
		_, _, errno := unix.RawSyscall6(uintptr(v[0]), uintptr(v[1]), uintptr(v[2]), uintptr(v[3]), uintptr(v[4]), uintptr(v[5]), uintptr(v[6]))
		fmt.Printf("%d\n", int(errno))
	}
	return 0
}

// probe is one syscall made in a child under a filter.
type probe struct {
	name string
	args [6]uint64
}

func (p probe) String() string {
	s := p.name + "("
	for i, a := range p.args {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%#x", a)
	}
	return s + ")"
}

type childResult struct {
	errnos  []syscall.Errno
	blocked []Blocked
	capped  bool
	status  syscall.WaitStatus
	output  string
}

// runChild runs the probes (or execs argv) in a child under filter. The
// child is root only inside a user namespace of its own, so that a filter
// that wrongly let reboot or mount through would still change nothing on
// the host; the arguments are invalid anyway.
func runChild(t *testing.T, p *Program, probes []probe, argv ...string) childResult {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading filters into children and taking their listeners needs root")
	}
	dir := t.TempDir()
	fpath := filepath.Join(dir, "filter.bpf")
	if err := os.WriteFile(fpath, p.Filter, 0o644); err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, pr := range probes {
		nr, err := libseccomp.GetSyscallFromName(pr.name)
		if err != nil {
			if n, perr := strconv.ParseUint(strings.TrimPrefix(pr.name, "#"), 0, 32); perr == nil {
				nr = libseccomp.ScmpSyscall(n)
			} else {
				t.Fatalf("unknown syscall %s", pr.name)
			}
		}
		f := []string{strconv.FormatUint(uint64(uint32(nr)), 10)}
		for _, a := range pr.args {
			f = append(f, strconv.FormatUint(a, 10))
		}
		calls = append(calls, strings.Join(f, ":"))
	}
	notify := "0"
	if p.Notify {
		notify = "1"
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{childEnv + "=1", "FILTER=" + fpath, "NOTIFY=" + notify, "CALLS=" + strings.Join(calls, ";"), "EXEC=" + strings.Join(argv, " ")}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var res childResult
	var rec *Recorder
	sc := bufio.NewScanner(stdout)
	if sc.Scan() {
		line := sc.Text()
		res.output += line + "\n"
		if fdStr, ok := strings.CutPrefix(line, "listener "); ok && p.Notify {
			fd, _ := strconv.Atoi(fdStr)
			pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
			if err != nil {
				t.Fatal(err)
			}
			lfd, err := unix.PidfdGetfd(pidfd, fd, 0)
			unix.Close(pidfd)
			if err != nil {
				t.Fatal(err)
			}
			rec = NewRecorder(lfd)
			rec.Start()
		}
	}
	stdin.Write([]byte{1})
	for sc.Scan() {
		line := sc.Text()
		res.output += line + "\n"
		if n, err := strconv.Atoi(line); err == nil && len(argv) == 0 {
			res.errnos = append(res.errnos, syscall.Errno(n))
		}
	}
	err = cmd.Wait()
	if rec != nil {
		res.blocked = rec.Stop()
		res.capped = rec.Capped()
	}
	res.status = cmd.ProcessState.Sys().(syscall.WaitStatus)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return res
}

func count(blocked []Blocked, name string) int {
	for _, b := range blocked {
		if b.Name == name {
			return b.Count
		}
	}
	return 0
}

func mustCompile(t testing.TB, policy string) *Program {
	t.Helper()
	p, err := Compile(policy)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sighandNoVM makes any clone the kernel accepts fail with EINVAL: a clone
// that a broken filter let through still creates nothing.
const sighandNoVM = unix.CLONE_SIGHAND

// refusedProbes are the never-allowed calls of SECURITY.md, with arguments the
// kernel would reject anyway.
var refusedProbes = []probe{
	{"ptrace", [6]uint64{unix.PTRACE_ATTACH, 1}},
	{"process_vm_readv", [6]uint64{1}},
	{"process_vm_writev", [6]uint64{1}},
	{"mount", [6]uint64{}},
	{"umount2", [6]uint64{}},
	{"pivot_root", [6]uint64{}},
	{"chroot", [6]uint64{}},
	{"unshare", [6]uint64{0xffffffff}},
	{"setns", [6]uint64{0xffff}},
	{"bpf", [6]uint64{0xffff}},
	{"perf_event_open", [6]uint64{}},
	{"keyctl", [6]uint64{0xffff}},
	{"add_key", [6]uint64{}},
	{"request_key", [6]uint64{}},
	{"userfaultfd", [6]uint64{0xffff}},
	{"io_uring_setup", [6]uint64{0}},
	{"io_uring_enter", [6]uint64{0xffff}},
	{"io_uring_register", [6]uint64{0xffff}},
	{"kexec_load", [6]uint64{0, 0xffff}},
	{"kexec_file_load", [6]uint64{0xffff, 0xffff}},
	{"init_module", [6]uint64{}},
	{"finit_module", [6]uint64{0xffff}},
	{"delete_module", [6]uint64{}},
	{"open_by_handle_at", [6]uint64{0xffff}},
	{"name_to_handle_at", [6]uint64{0xffff}},
	{"reboot", [6]uint64{}},
	{"swapon", [6]uint64{}},
	{"swapoff", [6]uint64{}},
	{"syslog", [6]uint64{0xffff}},
	{"acct", [6]uint64{1}},
	{"quotactl", [6]uint64{}},
	{"settimeofday", [6]uint64{1}},
	{"clock_settime", [6]uint64{0xffff}},
	{"adjtimex", [6]uint64{}},
	{"fsopen", [6]uint64{}},
	{"fsmount", [6]uint64{0xffff}},
	{"fsconfig", [6]uint64{0xffff}},
	{"fspick", [6]uint64{0xffff}},
	{"move_mount", [6]uint64{0xffff}},
	{"open_tree", [6]uint64{0xffff}},
	{"mount_setattr", [6]uint64{0xffff}},
	{"personality", [6]uint64{0x0040000}},         // ADDR_NO_RANDOMIZE
	{"ioctl", [6]uint64{0, unix.TIOCSTI}},         // push input into a terminal
	{"ioctl", [6]uint64{0, 1<<32 | unix.TIOCSTI}}, // the kernel ignores the high bits
	{"ioctl", [6]uint64{0, unix.TIOCLINUX}},       // console
	{"socket", [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW}},
	{"socket", [6]uint64{unix.AF_PACKET, unix.SOCK_RAW}},
	{"socket", [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM}},
	{"socket", [6]uint64{unix.AF_ALG, unix.SOCK_SEQPACKET}},
	{"clone", [6]uint64{unix.CLONE_NEWUSER | sighandNoVM}},
	{"clone", [6]uint64{unix.CLONE_NEWNS | sighandNoVM}},
	{"clone", [6]uint64{unix.CLONE_NEWNET | sighandNoVM}},
	{"clone", [6]uint64{unix.CLONE_NEWPID | sighandNoVM}},
}

// allowedProbes are ordinary calls that must reach the kernel.
var allowedProbes = []probe{
	{"getpid", [6]uint64{}},
	{"uname", [6]uint64{}}, // EFAULT from the kernel: it was let through
	{"personality", [6]uint64{0xffffffff}},
	{"socket", [6]uint64{unix.AF_INET, 0xffff}},
	{"socket", [6]uint64{unix.AF_UNIX, 0xffff}},
	{"socket", [6]uint64{unix.AF_INET6, 0xffff}},
	{"ioctl", [6]uint64{0xffff, unix.TCGETS}},
	{"clone", [6]uint64{sighandNoVM}},
	{"clone3", [6]uint64{0, 0}},
	{"setsid", [6]uint64{}},
	{"prctl", [6]uint64{0xffff}},
}

func TestDefaultRefusesAndRecords(t *testing.T) {
	p := mustCompile(t, "default")
	if !p.Notify || p.Name != "default" {
		t.Fatalf("default program: %+v", p)
	}
	probes := append(append([]probe{}, refusedProbes...), allowedProbes...)
	res := runChild(t, p, probes)
	if len(res.errnos) != len(probes) {
		t.Fatalf("child made %d of %d calls; output:\n%s", len(res.errnos), len(probes), res.output)
	}
	want := map[string]int{}
	for i, pr := range probes {
		errno := res.errnos[i]
		if i < len(refusedProbes) {
			want[pr.name]++
			if errno != unix.EPERM {
				t.Errorf("%v: errno %v, want EPERM", pr, errno)
			}
		} else if errno == unix.EPERM {
			t.Errorf("%v: EPERM, want it let through to the kernel", pr)
		}
	}
	for name, n := range want {
		if got := count(res.blocked, name); got != n {
			t.Errorf("blocked_syscalls[%s] = %d, want %d (all: %v)", name, got, n, res.blocked)
		}
	}
	if len(res.blocked) != len(want) {
		t.Errorf("blocked_syscalls = %v, want exactly %v", res.blocked, want)
	}
	for i := 1; i < len(res.blocked); i++ {
		if res.blocked[i-1].Name >= res.blocked[i].Name {
			t.Errorf("blocked_syscalls not sorted: %v", res.blocked)
		}
	}
}

func TestDefaultUnknownSyscallsGetENOSYS(t *testing.T) {
	p := mustCompile(t, "default")
	probes := []probe{{"#457", [6]uint64{}}, {"#462", [6]uint64{}}, {"#600", [6]uint64{}}, {"#1000", [6]uint64{}}}
	res := runChild(t, p, probes)
	if len(res.errnos) != len(probes) {
		t.Fatalf("output:\n%s", res.output)
	}
	for i, pr := range probes {
		if res.errnos[i] != unix.ENOSYS {
			t.Errorf("%s: errno %v, want ENOSYS", pr.name, res.errnos[i])
		}
	}
	if len(res.blocked) != 0 {
		t.Errorf("syscalls newer than the policy were recorded: %v", res.blocked)
	}
}

func TestX32ABIKillsTheProcess(t *testing.T) {
	p := mustCompile(t, "default")
	res := runChild(t, p, []probe{{"getpid", [6]uint64{}}, {fmt.Sprintf("#%d", x32Bit|39), [6]uint64{}}})
	if !res.status.Signaled() || res.status.Signal() != unix.SIGSYS {
		t.Fatalf("x32 getpid: status %v, want killed by SIGSYS; output:\n%s", res.status, res.output)
	}
}

// TestInt80KillsTheProcess runs a 64-bit program that enters the kernel
// through the 32-bit gate (int $0x80): with only x86_64 in the filter, the
// process must die, whatever the syscall (here i386 getpid, and i386 mount
// which a deny list for x86_64 numbers would miss).
func TestInt80KillsTheProcess(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("x86_64 only")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "int80.c")
	bin := filepath.Join(dir, "int80")
	os.WriteFile(src, []byte(`#include <stdio.h>
#include <unistd.h>
int main(void) {
	long ret;
	/* i386 syscall 20 is getpid; 21 is mount */
	__asm__ volatile ("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
	printf("int80 getpid returned %ld\n", ret);
	__asm__ volatile ("int $0x80" : "=a"(ret) : "a"(21L), "b"(0L), "c"(0L), "d"(0L) : "memory");
	printf("int80 mount returned %ld\n", ret);
	return 0;
}
`), 0o644)
	if out, err := exec.Command(gcc, "-O2", "-static", "-o", bin, src).CombinedOutput(); err != nil {
		if out, err = exec.Command(gcc, "-O2", "-o", bin, src).CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
	}
	// Unfiltered, the gate works, unless the kernel has no 32-bit
	// emulation (ia32_emulation=0, or built without it): then int $0x80
	// faults before any filter could see it, and that is all the policy
	// may let happen too.
	gate := true
	if out, err := exec.Command(bin).CombinedOutput(); err != nil || !strings.Contains(string(out), "getpid returned") {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != unix.SIGSEGV || strings.Contains(string(out), "returned") {
			t.Fatalf("unfiltered int80: %v %s", err, out)
		}
		gate = false
		t.Log("this kernel has no 32-bit syscall gate: int $0x80 faults (SIGSEGV) before seccomp")
	}
	res := runChild(t, mustCompile(t, "default"), nil, bin)
	want := unix.SIGSYS
	if !gate {
		want = unix.SIGSEGV
	}
	if !res.status.Signaled() || res.status.Signal() != want {
		t.Fatalf("int $0x80 under the default policy: status %v, want %v; output:\n%s", res.status, want, res.output)
	}
	if strings.Contains(res.output, "returned") {
		t.Fatalf("int $0x80 reached the kernel:\n%s", res.output)
	}
}

func TestSeccompModeInProcStatus(t *testing.T) {
	res := runChild(t, mustCompile(t, "default"), nil, "/bin/grep", "^Seccomp:", "/proc/self/status")
	if !strings.Contains(res.output, "Seccomp:\t2") {
		t.Fatalf("under the default policy /proc/self/status says:\n%s", res.output)
	}
	p, err := Compile("none")
	if err != nil || p.Notify || p.Name != "none" || p.Instructions() != 9 {
		t.Fatalf("Compile(none) = %+v, %v: want the vsock guard alone", p, err)
	}
}

// No policy lets a vsock socket be made (the network namespace does not
// cover vsock): "none" and a profile that allows everything refuse it
// with EAFNOSUPPORT, the default with EPERM; other families are the
// policy's.
func TestVsockRefusedByEveryPolicy(t *testing.T) {
	allowAll := filepath.Join(t.TempDir(), "all.json")
	os.WriteFile(allowAll, []byte(`{"defaultAction": "SCMP_ACT_ALLOW"}`), 0o644)
	probes := []probe{
		{"socket", [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM}},
		{"socketpair", [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM, 0, 0}},
		{"socket", [6]uint64{0xffffffff00000000 | unix.AF_VSOCK, unix.SOCK_STREAM}},
		{"socket", [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM}},
	}
	for _, c := range []struct {
		policy string
		vsock  syscall.Errno
	}{{"none", unix.EAFNOSUPPORT}, {allowAll, unix.EAFNOSUPPORT}, {"default", unix.EPERM}} {
		res := runChild(t, mustCompile(t, c.policy), probes)
		if len(res.errnos) != len(probes) {
			t.Fatalf("%s: %d of %d calls made: %s", c.policy, len(res.errnos), len(probes), res.output)
		}
		for i, want := range []syscall.Errno{c.vsock, c.vsock, c.vsock, 0} {
			// A unix socket is made (a descriptor, errno 0) or fails
			// for a reason of its own, never as the guard's refusal.
			if got := res.errnos[i]; (want == 0 && (got == unix.EAFNOSUPPORT || got == unix.EPERM)) || (want != 0 && got != want) {
				t.Errorf("%s: %v: errno %v, want %v", c.policy, probes[i], got, want)
			}
		}
	}
}

func TestRecorderCapsAndFallsBackToENOSYS(t *testing.T) {
	p := mustCompile(t, "default")
	const n = 3 * MaxAnswered
	probes := make([]probe, n)
	for i := range probes {
		probes[i] = probe{"ptrace", [6]uint64{unix.PTRACE_ATTACH, 1}}
	}
	res := runChild(t, p, probes)
	if len(res.errnos) != n {
		t.Fatalf("child made %d of %d calls", len(res.errnos), n)
	}
	for i, e := range res.errnos {
		want := unix.EPERM
		if i >= MaxAnswered {
			want = unix.ENOSYS
		}
		if e != want {
			t.Fatalf("call %d: errno %v, want %v", i, e, want)
		}
	}
	if !res.capped || count(res.blocked, "ptrace") != MaxAnswered {
		t.Fatalf("capped=%v blocked=%v, want capped at %d", res.capped, res.blocked, MaxAnswered)
	}
}

func TestRecorderStopIsIdempotentAndNeverNil(t *testing.T) {
	r := NewRecorder(-1)
	r.Start()
	if b := r.Stop(); b == nil || len(b) != 0 {
		t.Fatalf("Stop = %#v", b)
	}
	if b := r.Stop(); b == nil {
		t.Fatal("second Stop returned nil")
	}
	// A real listener that never gets a notification.
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	r = NewRecorder(fds[0])
	// Non-blocking, so in Go's poller: only such a file takes a deadline.
	if err := r.file.SetReadDeadline(time.Time{}); err != nil {
		t.Errorf("the listener is not in the poller: %v", err)
	}
	r.Start()
	r.Stop()
	r.Stop()
	<-r.done // the loop closes the listener before it ends
	if _, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFD, 0); err != unix.EBADF {
		t.Fatalf("Stop did not close the listener: %v", err)
	}
}

func TestWithoutNotifyAnswersEPERMDirectly(t *testing.T) {
	p := mustCompile(t, "default").WithoutNotify()
	if p.Notify {
		t.Fatal("still notifying")
	}
	res := runChild(t, p, []probe{{"ptrace", [6]uint64{unix.PTRACE_ATTACH, 1}}, {"getpid", [6]uint64{}}})
	if len(res.errnos) != 2 || res.errnos[0] != unix.EPERM || res.errnos[1] != 0 {
		t.Fatalf("errnos %v; output:\n%s", res.errnos, res.output)
	}
}

func TestInstallRejectsBadPrograms(t *testing.T) {
	for _, f := range [][]byte{nil, make([]byte, 7), make([]byte, 8*(maxInsns+1))} {
		if _, err := Install(f, false); err == nil {
			t.Errorf("Install(%d bytes) succeeded", len(f))
		}
	}
	// A program the kernel's checker refuses (jump out of range), on a
	// throwaway thread.
	bad := encode(nil)
	bad = append(bad, make([]byte, 8)...)
	binary.NativeEndian.PutUint16(bad, unix.BPF_JMP|unix.BPF_JA)
	binary.NativeEndian.PutUint32(bad[4:], 5)
	errc := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		_, err := Install(bad, false)
		errc <- err
	}()
	if err := <-errc; err == nil {
		t.Fatal("kernel accepted a jump out of the program")
	}
}

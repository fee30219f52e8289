package main

// The seccomp layer through the real binary: refused syscalls
// are named in blocked_syscalls, int $0x80 cannot bypass the policy,
// profiles work and broken ones are usage errors, /proc shows the mode, and
// real Go and Java programs run untouched under the default policy.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
)

// neverAllowed are the never-allowed calls (SECURITY.md) as C expressions, with
// arguments the kernel would reject anyway (the program has no privilege
// either: only blocked_syscalls proves the filter refused them).
var neverAllowed = []struct{ name, call string }{
	{"ptrace", "syscall(SYS_ptrace, PTRACE_ATTACH, 1, 0, 0)"},
	{"process_vm_readv", "syscall(SYS_process_vm_readv, 1, 0, 0, 0, 0, 0)"},
	{"process_vm_writev", "syscall(SYS_process_vm_writev, 1, 0, 0, 0, 0, 0)"},
	{"mount", "syscall(SYS_mount, 0, 0, 0, 0, 0)"},
	{"umount2", "syscall(SYS_umount2, 0, 0)"},
	{"fsopen", "syscall(SYS_fsopen, 0, 0)"},
	{"fsconfig", "syscall(SYS_fsconfig, -1, 0, 0, 0, 0)"},
	{"fsmount", "syscall(SYS_fsmount, -1, 0, 0)"},
	{"fspick", "syscall(SYS_fspick, -1, 0, 0)"},
	{"move_mount", "syscall(SYS_move_mount, -1, 0, -1, 0, 0)"},
	{"open_tree", "syscall(SYS_open_tree, -1, 0, 0)"},
	{"mount_setattr", "syscall(SYS_mount_setattr, -1, 0, 0, 0, 0)"},
	{"pivot_root", "syscall(SYS_pivot_root, 0, 0)"},
	{"chroot", "syscall(SYS_chroot, 0)"},
	{"unshare", "syscall(SYS_unshare, CLONE_NEWUSER)"},
	{"setns", "syscall(SYS_setns, -1, 0)"},
	{"bpf", "syscall(SYS_bpf, -1, 0, 0)"},
	{"perf_event_open", "syscall(SYS_perf_event_open, 0, 0, -1, -1, 0)"},
	{"keyctl", "syscall(SYS_keyctl, -1, 0, 0, 0, 0)"},
	{"add_key", "syscall(SYS_add_key, 0, 0, 0, 0, 0)"},
	{"request_key", "syscall(SYS_request_key, 0, 0, 0, 0)"},
	{"userfaultfd", "syscall(SYS_userfaultfd, -1)"},
	{"io_uring_setup", "syscall(SYS_io_uring_setup, 0, 0)"},
	{"io_uring_enter", "syscall(SYS_io_uring_enter, -1, 0, 0, 0, 0, 0)"},
	{"io_uring_register", "syscall(SYS_io_uring_register, -1, 0, 0, 0)"},
	{"kexec_load", "syscall(SYS_kexec_load, 0, 100000, 0, 0)"},
	{"kexec_file_load", "syscall(SYS_kexec_file_load, -1, -1, 0, 0, 0)"},
	{"init_module", "syscall(SYS_init_module, 0, 0, 0)"},
	{"finit_module", "syscall(SYS_finit_module, -1, 0, 0)"},
	{"delete_module", "syscall(SYS_delete_module, 0, 0)"},
	{"open_by_handle_at", "syscall(SYS_open_by_handle_at, -1, 0, 0)"},
	{"name_to_handle_at", "syscall(SYS_name_to_handle_at, -1, 0, 0, 0, 0)"},
	{"reboot", "syscall(SYS_reboot, 0, 0, 0, 0)"},
	{"swapon", "syscall(SYS_swapon, 0, 0)"},
	{"swapoff", "syscall(SYS_swapoff, 0)"},
	{"syslog", "syscall(SYS_syslog, -1, 0, 0)"},
	{"acct", "syscall(SYS_acct, 1)"},
	{"quotactl", "syscall(SYS_quotactl, 0, 0, 0, 0)"},
	{"settimeofday", "syscall(SYS_settimeofday, 1, 0)"},
	{"clock_settime", "syscall(SYS_clock_settime, -1, 0)"},
	{"adjtimex", "syscall(SYS_adjtimex, 0)"},
	{"personality", "syscall(SYS_personality, 0x0040000 /* ADDR_NO_RANDOMIZE */)"},
	{"ioctl", "syscall(SYS_ioctl, 0, TIOCSTI, 0)"},
	{"ioctl", "syscall(SYS_ioctl, 0, (1UL << 32) | TIOCSTI, 0) /* high bits: ignored by the kernel */"},
	{"ioctl", "syscall(SYS_ioctl, 0, TIOCLINUX, 0)"},
	{"socket", "syscall(SYS_socket, AF_NETLINK, SOCK_RAW, 0)"},
	{"socket", "syscall(SYS_socket, AF_PACKET, SOCK_RAW, 0)"},
	{"socket", "syscall(SYS_socket, AF_VSOCK, SOCK_STREAM, 0)"},
	{"socket", "syscall(SYS_socket, AF_ALG, SOCK_SEQPACKET, 0)"},
	// CLONE_SIGHAND without CLONE_VM: EINVAL if it ever got through.
	{"clone", "syscall(SYS_clone, CLONE_NEWUSER | CLONE_SIGHAND, 0, 0, 0, 0)"},
	{"clone", "syscall(SYS_clone, CLONE_NEWNS | CLONE_SIGHAND, 0, 0, 0, 0)"},
	{"clone", "syscall(SYS_clone, CLONE_NEWNET | CLONE_SIGHAND, 0, 0, 0, 0)"},
}

// seccompDir is a directory the box user can read, holding the test's
// programs; it is bound at /opt/sc.
func seccompDir(t *testing.T) (string, []string) {
	t.Helper()
	dir := shareDir(t)
	return dir, []string{"--bind", dir + ":/opt/sc"}
}

func TestSeccompNeverAllowedRefusedAndNamed(t *testing.T) {
	needRoot(t)
	dir, bind := seccompDir(t)
	var src strings.Builder
	src.WriteString(`#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/if_alg.h>
#include <linux/vm_sockets.h>
#include <linux/netlink.h>
#ifndef AF_ALG
#define AF_ALG 38
#endif
static void report(const char *name, long r) { printf("%s %ld %d\n", name, r, r < 0 ? errno : 0); }
int main(void) {
`)
	for _, c := range neverAllowed {
		src.WriteString("\treport(\"" + c.name + "\", " + c.call + ");\n")
	}
	src.WriteString("\treport(\"getpid\", syscall(SYS_getpid));\n\treturn 0;\n}\n")
	compileC(t, dir, "refused", src.String(), "-static")
	rep, _ := runBox(t, append(bind, "--", "/opt/sc/refused")...)
	expectStatus(t, rep, isolate.StatusOK)
	lines := strings.Split(strings.TrimSpace(rep.Stdout), "\n")
	if len(lines) != len(neverAllowed)+1 {
		t.Fatalf("%d lines of output, want %d:\n%s", len(lines), len(neverAllowed)+1, rep.Stdout)
	}
	want := map[string]int{}
	for i, c := range neverAllowed {
		want[c.name]++
		f := strings.Fields(lines[i])
		if len(f) != 3 || f[0] != c.name || f[1] != "-1" || f[2] != "1" {
			t.Errorf("%s: %q, want -1 with errno 1 (EPERM)", c.call, lines[i])
		}
	}
	if f := strings.Fields(lines[len(lines)-1]); len(f) != 3 || f[0] != "getpid" || f[2] != "0" {
		t.Errorf("getpid after the refusals: %q", lines[len(lines)-1])
	}
	got := map[string]int{}
	for _, b := range rep.BlockedSyscalls {
		got[b.Name] = b.Count
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("blocked_syscalls[%s] = %d, want %d", name, got[name], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("blocked_syscalls = %v, want exactly %v", rep.BlockedSyscalls, want)
	}
	for i := 1; i < len(rep.BlockedSyscalls); i++ {
		if rep.BlockedSyscalls[i-1].Name >= rep.BlockedSyscalls[i].Name {
			t.Fatalf("blocked_syscalls not sorted by name: %v", rep.BlockedSyscalls)
		}
	}
}

// TestSeccompInt80CannotBypass enters the kernel through the 32-bit gate
// from a 64-bit program: i386 mount (21) and getpid (20) are not x86_64
// numbers a deny list would know; the policy must kill the process.
func TestSeccompInt80CannotBypass(t *testing.T) {
	needRoot(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("x86_64 only")
	}
	dir, bind := seccompDir(t)
	bin := compileC(t, dir, "int80", `#include <stdio.h>
int main(void) {
	long ret;
	__asm__ volatile ("int $0x80" : "=a"(ret) : "a"(21L), "b"(0L), "c"(0L), "d"(0L) : "memory");
	printf("int80 mount returned %ld\n", ret);
	__asm__ volatile ("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
	printf("int80 getpid returned %ld\n", ret);
	return 0;
}
`, "-static")
	// Without a filter the gate works, unless the kernel has no 32-bit
	// emulation: then int $0x80 faults (SIGSEGV) before seccomp could see
	// it, in the box as on the host, and nothing else may happen.
	wantSignal, unfiltered := 31, isolate.StatusOK
	if out, err := exec.Command(bin).CombinedOutput(); err != nil || !strings.Contains(string(out), "getpid returned") {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGSEGV || strings.Contains(string(out), "returned") {
			t.Fatalf("int $0x80 on the host: %v %s", err, out)
		}
		t.Log("this kernel has no 32-bit syscall gate: int $0x80 faults before seccomp")
		wantSignal, unfiltered = int(syscall.SIGSEGV), isolate.StatusSG
	}
	rep, code := runBox(t, append(bind, "--", "/opt/sc/int80")...)
	expectStatus(t, rep, isolate.StatusSG)
	if rep.Signal != wantSignal || code != 1 || strings.Contains(rep.Stdout, "returned") {
		t.Fatalf("signal %d, exit %d, stdout %q: want signal %d before any output", rep.Signal, code, rep.Stdout, wantSignal)
	}
	rep, _ = runBox(t, append(bind, "--seccomp", "none", "--", "/opt/sc/int80")...)
	expectStatus(t, rep, unfiltered)
}

func TestSeccompProfileDenyingUname(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	profile := filepath.Join(dir, "no-uname.json")
	os.WriteFile(profile, []byte(`{
	"defaultAction": "SCMP_ACT_ALLOW",
	"syscalls": [{"names": ["uname"], "action": "SCMP_ACT_ERRNO"}]
}`), 0o644)
	rep, code := runBox(t, "--seccomp", profile, "--", "/bin/uname")
	expectStatus(t, rep, isolate.StatusRE)
	if code != 1 || !strings.Contains(rep.Stderr, "Operation not permitted") {
		t.Fatalf("exit %d, stderr %q", code, rep.Stderr)
	}
	if rep.Sandbox.Seccomp != profile {
		t.Errorf("sandbox.seccomp = %q, want the profile's path", rep.Sandbox.Seccomp)
	}
	rep, _ = runBox(t, "--", "/bin/uname")
	expectStatus(t, rep, isolate.StatusOK)

	// With SCMP_ACT_NOTIFY the refusal is also named in the report.
	os.WriteFile(profile, []byte(`{"defaultAction": "SCMP_ACT_ALLOW",
	"syscalls": [{"names": ["uname"], "action": "SCMP_ACT_NOTIFY"}]}`), 0o644)
	rep, _ = runBox(t, "--seccomp", profile, "--", "/bin/uname")
	expectStatus(t, rep, isolate.StatusRE)
	if len(rep.BlockedSyscalls) != 1 || rep.BlockedSyscalls[0].Name != "uname" {
		t.Fatalf("blocked_syscalls = %v, want uname", rep.BlockedSyscalls)
	}
}

func TestSeccompBrokenProfileIsAUsageError(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	profile := filepath.Join(dir, "broken.json")
	os.WriteFile(profile, []byte(`{"defaultAction": "SCMP_ACT_ALLOW",
	"syscalls": [{"names": ["getpid"], "action": "SCMP_ACT_ERRNO"}, {"names": ["uname"], "action": "SCMP_ACT_EPERM"}]}`), 0o644)
	marker := filepath.Join(dir, "ran")
	for _, p := range []string{profile, filepath.Join(dir, "missing.json")} {
		res := isolateCmd(t, "", "run", "--json", "--seccomp", p, "--bind", dir+":/opt/sc:rw", "--", "/bin/touch", "/opt/sc/ran")
		if res.Code != 2 || res.Stdout != "" {
			t.Errorf("--seccomp %s: exit %d, stdout %q; want exit 2 and no report", p, res.Code, res.Stdout)
		}
		if !strings.Contains(res.Stderr, p) {
			t.Errorf("--seccomp %s: %q does not name the profile", p, res.Stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("--seccomp %s: the program ran", p)
		}
	}
	res := isolateCmd(t, "", "run", "--seccomp", profile, "--", "/bin/true")
	if !strings.Contains(res.Stderr, `syscalls[1] (uname)`) || !strings.Contains(res.Stderr, `"SCMP_ACT_EPERM"`) {
		t.Errorf("the message does not name the entry: %q", res.Stderr)
	}
}

func TestSeccompModeInProcStatus(t *testing.T) {
	needRoot(t)
	// "none" filters vsock sockets only (TestVsockRefusedInEveryPolicy).
	for _, c := range []struct{ policy, want string }{{"default", "Seccomp:\t2"}, {"none", "Seccomp:\t2"}} {
		rep, _ := runBox(t, "--seccomp", c.policy, "--", "/bin/grep", "^Seccomp:", "/proc/self/status")
		expectStatus(t, rep, isolate.StatusOK)
		if !strings.Contains(rep.Stdout, c.want+"\n") {
			t.Errorf("--seccomp %s: /proc/self/status says %q, want %q", c.policy, rep.Stdout, c.want)
		}
		if rep.Sandbox.Seccomp != c.policy {
			t.Errorf("--seccomp %s: sandbox.seccomp = %q", c.policy, rep.Sandbox.Seccomp)
		}
	}
}

// TestSeccompRecordingIsCapped: a program hammering a refused syscall runs
// at full speed: after the cap the kernel answers ENOSYS itself.
func TestSeccompRecordingIsCapped(t *testing.T) {
	needRoot(t)
	dir, bind := seccompDir(t)
	compileC(t, dir, "hammer", `#include <errno.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
	long r = syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0);
	printf("first %ld %d\n", r, errno);
	for (int i = 0; i < 1000000; i++)
		syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0);
	r = syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0);
	printf("last %ld %d\n", r, errno);
	return 0;
}
`, "-static")
	rep, _ := runBox(t, append(bind, "-w", "20s", "--", "/opt/sc/hammer")...)
	expectStatus(t, rep, isolate.StatusOK)
	if rep.Stdout != "first -1 1\nlast -1 38\n" {
		t.Errorf("stdout %q: want EPERM (1) first, ENOSYS (38) after the cap", rep.Stdout)
	}
	if len(rep.BlockedSyscalls) != 1 || rep.BlockedSyscalls[0].Name != "ptrace" || rep.BlockedSyscalls[0].Count != 1000 {
		t.Errorf("blocked_syscalls = %v, want ptrace counted up to the cap (1000)", rep.BlockedSyscalls)
	}
}

// TestSeccompGoProgramRuns builds a Go program with the host's toolchain
// and runs it under the default policy: goroutines, the GC, timers, a
// child process, loopback TCP.
func TestSeccompGoProgramRuns(t *testing.T) {
	needRoot(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on this host")
	}
	dir, bind := seccompDir(t)
	src := filepath.Join(dir, "main.go")
	os.WriteFile(src, []byte(`package main

import (
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"sync"
	"time"
)

func main() {
	var wg sync.WaitGroup
	sums := make([]int, 8)
	for i := range sums {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]int, 1<<18)
			for j := range b {
				b[j] = j
				sums[i] += b[j] % 7
			}
			time.Sleep(time.Millisecond)
		}()
	}
	wg.Wait()
	runtime.GC()
	out, err := exec.Command("/bin/echo", "child").Output()
	if err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { c, _ := l.Accept(); c.Write([]byte("pong")); c.Close() }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		panic(err)
	}
	buf := make([]byte, 4)
	n, _ := c.Read(buf)
	fmt.Println("go ok", sums[0], string(out[:5]), string(buf[:n]))
}
`), 0o644)
	build := exec.Command(goBin, "build", "-o", filepath.Join(dir, "goprog"), src)
	build.Dir = dir
	build.Env = append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rep, _ := runBox(t, append(bind, "--", "/opt/sc/goprog")...)
	expectStatus(t, rep, isolate.StatusOK)
	want := "go ok " + strconv.Itoa(goSum()) + " child pong\n"
	if rep.Stdout != want || len(rep.BlockedSyscalls) != 0 {
		t.Fatalf("stdout %q (want %q), blocked %v", rep.Stdout, want, rep.BlockedSyscalls)
	}
}

func goSum() int {
	s := 0
	for j := 0; j < 1<<18; j++ {
		s += j % 7
	}
	return s
}

// TestSeccompJavaProgramRuns compiles a Java program on the host and runs
// it on the host's JVM under the default policy: the JVM's own threads
// (GC, JIT, signal handling), a thread pool, and a child process.
func TestSeccompJavaProgramRuns(t *testing.T) {
	needRoot(t)
	javac, err1 := exec.LookPath("javac")
	java, err2 := exec.LookPath("java")
	if err1 != nil || err2 != nil {
		t.Skip("no JDK on this host")
	}
	dir, bind := seccompDir(t)
	src := filepath.Join(dir, "Main.java")
	os.WriteFile(src, []byte(`import java.util.concurrent.*;

public class Main {
	public static void main(String[] args) throws Exception {
		ExecutorService pool = Executors.newFixedThreadPool(4);
		Future<Long> f = pool.submit(() -> {
			long s = 0;
			for (int i = 0; i < 10_000_000; i++) s += i % 7;
			return s;
		});
		long s = f.get();
		pool.shutdown();
		System.gc();
		Process p = new ProcessBuilder("/bin/echo", "child").start();
		String out = new String(p.getInputStream().readAllBytes()).trim();
		p.waitFor();
		System.out.println("java ok " + s + " " + out);
	}
}
`), 0o644)
	// No perf data: the JVM would leave /tmp/hsperfdata_root on the host.
	if out, err := exec.Command(javac, "-J-XX:-UsePerfData", "-d", dir, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o755) })
	rep, _ := runBox(t, append(bind, "--", java, "-Xmx128m", "-cp", "/opt/sc", "Main")...)
	expectStatus(t, rep, isolate.StatusOK)
	want := "java ok 29999994 child\n"
	if rep.Stdout != want || len(rep.BlockedSyscalls) != 0 {
		t.Fatalf("stdout %q (want %q), stderr %q, blocked %v", rep.Stdout, want, rep.Stderr, rep.BlockedSyscalls)
	}
}

// TestVsockRefusedInEveryPolicy: a box's network namespace does not cover
// vsock, so no policy lets the program make a vsock socket (on a virtual
// machine it would reach the hypervisor's host): not --seccomp none, not
// a profile that allows everything.
func TestVsockRefusedInEveryPolicy(t *testing.T) {
	needRoot(t)
	dir, bind := seccompDir(t)
	compileC(t, dir, "vsock", `#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
int main(void) {
	int fd = socket(40 /* AF_VSOCK */, SOCK_STREAM, 0);
	int sv[2];
	int pair = socketpair(40, SOCK_STREAM, 0, sv);
	printf("socket %d %s\n", fd, fd < 0 ? strerror(errno) : "made");
	printf("socketpair %d\n", pair);
	int un = socket(AF_UNIX, SOCK_STREAM, 0);
	printf("unix %s\n", un >= 0 ? "made" : "refused");
	return 0;
}`)
	profile := filepath.Join(dir, "all.json")
	os.WriteFile(profile, []byte(`{"defaultAction": "SCMP_ACT_ALLOW"}`), 0o644)
	for _, c := range []struct{ policy, refusal string }{
		{"none", "Address family not supported"}, {profile, "Address family not supported"}, {"default", "Operation not permitted"},
	} {
		rep, _ := runBox(t, append(bind, "--seccomp", c.policy, "--", "/opt/sc/vsock")...)
		if rep.Status != isolate.StatusOK || !strings.Contains(rep.Stdout, "socket -1 "+c.refusal) ||
			!strings.Contains(rep.Stdout, "socketpair -1") || !strings.Contains(rep.Stdout, "unix made") {
			t.Errorf("--seccomp %s: %s %q", c.policy, rep.Status, rep.Stdout)
		}
	}
}

// TestTracemeGetsItsVerdict: a program that makes init its tracer
// (PTRACE_TRACEME, allowed under --seccomp none) gets the verdict it
// earned: a signal that kills it is SG with that signal, not an exit; a
// traced execve runs the program as usual.
func TestTracemeGetsItsVerdict(t *testing.T) {
	needRoot(t)
	dir, bind := seccompDir(t)
	compileC(t, dir, "traceme", `#include <signal.h>
#include <sys/ptrace.h>
#include <unistd.h>
int main(int argc, char **argv) {
	if (ptrace(PTRACE_TRACEME, 0, 0, 0) != 0)
		return 3;
	if (argc > 1 && argv[1][0] == 'e')
		execl("/bin/echo", "echo", "exec'd", (char *)0);
	if (argc > 1 && argv[1][0] == 'k')
		kill(getpid(), SIGTERM);
	raise(SIGSEGV);
	return 4;
}`)
	for _, c := range []struct {
		arg    string
		status isolate.Status
		signal int
	}{{"segv", isolate.StatusSG, 11}, {"kill", isolate.StatusSG, 15}, {"exec", isolate.StatusOK, 0}} {
		rep, _ := runBox(t, append(bind, "--seccomp", "none", "--", "/opt/sc/traceme", c.arg)...)
		if rep.Status != c.status || rep.Signal != c.signal || rep.ExitCode == -1 {
			t.Errorf("PTRACE_TRACEME then %s: %s signal %d exit %d (%s), want %s signal %d", c.arg, rep.Status, rep.Signal, rep.ExitCode, rep.Message, c.status, c.signal)
		}
		if c.arg == "exec" && rep.Stdout != "exec'd\n" {
			t.Errorf("PTRACE_TRACEME then execve: stdout %q", rep.Stdout)
		}
	}
}

// The ioi form's meta file names no blocked system call, so its runs
// take the policy without a listener: every call the policy refuses is
// refused the same way (EPERM), in process and handed over, with
// nothing recorded.
func TestSeccompIOIFormRefusesWithoutRecording(t *testing.T) {
	needRoot(t)
	dir, _ := seccompDir(t)
	var src strings.Builder
	src.WriteString("#define _GNU_SOURCE\n#include <errno.h>\n#include <sched.h>\n#include <stdio.h>\n#include <sys/ioctl.h>\n" +
		"#include <sys/ptrace.h>\n#include <sys/socket.h>\n#include <sys/syscall.h>\n#include <unistd.h>\n#include <linux/vm_sockets.h>\n" +
		"#ifndef AF_ALG\n#define AF_ALG 38\n#endif\n" +
		"static void report(const char *name, long r) { printf(\"%s %ld %d\\n\", name, r, r < 0 ? errno : 0); }\nint main(void) {\n")
	for _, c := range neverAllowed {
		src.WriteString("\treport(\"" + c.name + "\", " + c.call + ");\n")
	}
	src.WriteString("\treturn 0;\n}\n")
	prog := compileC(t, dir, "refused", src.String(), "-static")
	ioiBoxRoot(t)
	box := ioiBox(t, 962)
	data, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(box, "box", "refused"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	m, res := ioiMeta(t, "-b", "962", "--run", "--", "./refused")
	if res.Code != 0 || m["exitcode"] != "0" {
		t.Fatalf("exit %d, meta %v, stderr %q", res.Code, m, res.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != len(neverAllowed) {
		t.Fatalf("%d lines of output, want %d:\n%s", len(lines), len(neverAllowed), res.Stdout)
	}
	for i, c := range neverAllowed {
		if f := strings.Fields(lines[i]); len(f) != 3 || f[0] != c.name || f[1] != "-1" || f[2] != "1" {
			t.Errorf("%s: %q, want -1 with errno 1 (EPERM)", c.call, lines[i])
		}
	}
}

package isolate

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
	"github.com/isolate-sandbox/isolate/isolate/boxinit/initbin"
	"golang.org/x/sys/unix"
)

// selfExe is the default init: this binary, whose ELF constructor runs
// init when started with InitArg (init.go).
const selfExe = "/proc/self/exe"

var smallInit = sync.OnceValue(loadSmallInit)

// initPath is the executable that becomes a box's init: in a build with
// the initbin tag, the small init it embeds (package initbin), from a
// sealed memfd made at first use. Also in the one-shot CLI, where making
// the memfd costs less than the exec of itself saves (A/B: 0.2-0.3 ms of
// latency, 0.4-1 ms of CPU per run). Builds without the tag start init
// from /proc/self/exe, and so does a process that cannot make the memfd.
func initPath() string { return smallInit() }

func loadSmallInit() string {
	bin := initbin.Binary()
	if bin == nil {
		return selfExe
	}
	fd, err := sealedMemfd("isolate-init", bin)
	if err == nil {
		// This process's descriptor, by its PID as /proc names it: the
		// forked child's own (/proc/self/fd) are being moved around by
		// syscall.ForkExec, its temporaries just above the highest
		// descriptor it hands on, which may be the memfd's number.
		var self string
		if self, err = os.Readlink("/proc/self"); err == nil {
			return "/proc/" + self + "/fd/" + strconv.Itoa(fd)
		}
		unix.Close(fd)
	}
	smallInitFailed(err)
	return selfExe
}

// smallInitFailed says once, in a long-running process, that its boxes
// start from /proc/self/exe (a run never fails for it; the one-shot CLI's
// stderr is the user's).
func smallInitFailed(err error) {
	if !boxinit.OneShot.Load() {
		warnSmallInit.Do(func() {
			fmt.Fprintf(os.Stderr, "isolate: boxes start from %s, not the small init: %v\n", selfExe, err)
		})
	}
}

var warnSmallInit sync.Once

// smallInitRefused counts the inits started from /proc/self/exe after
// the kernel refused the small init (the tests check it stays 0).
var smallInitRefused atomic.Int64

// forkInitExe starts init from initPath; should the kernel refuse the
// small init's path (a security module, a /proc of another PID
// namespace), from /proc/self/exe.
func forkInitExe(argv []string, attr *syscall.ProcAttr, netns int) (pid int, err error) {
	path := initPath()
	pid, err = boxinit.ForkInit(path, argv, attr, netns)
	if err != nil && path != selfExe {
		smallInitRefused.Add(1)
		smallInitFailed(fmt.Errorf("exec %s: %w", path, err))
		pid, err = boxinit.ForkInit(selfExe, argv, attr, netns)
	}
	return pid, err
}

// sealedMemfd returns a close-on-exec descriptor of a memfd holding data
// that nobody (a box's processes included: they may find it as their
// init's /proc/PID/exe) can change.
func sealedMemfd(name string, data []byte) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	for off := 0; off < len(data); {
		n, err := unix.Pwrite(fd, data[off:], int64(off))
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("write the memfd: %w", err)
		}
		off += n
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("seal the memfd: %w", err)
	}
	return fd, nil
}

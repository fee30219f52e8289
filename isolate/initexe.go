package isolate

import (
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/isolate-sandbox/isolate/isolate/initbin"
	"golang.org/x/sys/unix"
)

// selfExe is the default init: this binary, whose ELF constructor runs
// init when started with InitArg (init.go).
const selfExe = "/proc/self/exe"

// smallInitFD is the lowest descriptor the small init's memfd may take:
// syscall.ForkExec moves attr.Files onto 0..n and its temporaries just
// above, which must never reach it.
const smallInitFD = 100

var smallInit = sync.OnceValue(loadSmallInit)

// initPath is the executable that becomes a box's init: in a build with
// the initbin tag, the small init it embeds (package initbin), from a
// sealed memfd made at first use. Also in the one-shot CLI, where making
// the memfd costs less than the exec of itself saves (A/B: 0.2-0.3 ms of
// latency, 0.4-1 ms of CPU per run). Builds without the tag start init
// from /proc/self/exe, and so does a process that cannot make the memfd:
// a run never fails for it (a long-running process says so once; the
// CLI's stderr is the user's).
func initPath() string { return smallInit() }

func loadSmallInit() string {
	bin := initbin.Binary()
	if bin == nil {
		return selfExe
	}
	fd, err := sealedMemfd("isolate-init", bin)
	if err != nil {
		if !oneShot.Load() {
			fmt.Fprintf(os.Stderr, "isolate: boxes start from %s, not the small init: %v\n", selfExe, err)
		}
		return selfExe
	}
	return "/proc/self/fd/" + strconv.Itoa(fd)
}

// sealedMemfd returns a close-on-exec descriptor, at smallInitFD or above,
// of a memfd holding data that nobody (a box's processes included: they
// may find it as their init's /proc/PID/exe) can change.
func sealedMemfd(name string, data []byte) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	defer unix.Close(fd)
	for off := 0; off < len(data); {
		n, err := unix.Pwrite(fd, data[off:], int64(off))
		if err != nil {
			return -1, fmt.Errorf("write the memfd: %w", err)
		}
		off += n
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return -1, fmt.Errorf("seal the memfd: %w", err)
	}
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, smallInitFD)
	if err != nil {
		return -1, fmt.Errorf("move the memfd up: %w", err)
	}
	return high, nil
}

package seccomp

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
	"unsafe"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
)

// Blocked is one refused syscall and how many times it was refused (report field blocked_syscalls).
// The type is the contract's (package api), so the report can hold it
// without linking this package.
type Blocked = api.Blocked

// MaxAnswered is how many refused calls a Recorder answers before it closes
// the listener. After that the kernel fails every further refused call at
// once with ENOSYS (a filter whose listener is gone cannot notify), so a
// program calling a refused syscall in a loop never waits on the
// supervisor. Each answered call costs two context switches (~10 µs).
const MaxAnswered = 1000

// seccompNotif is struct seccomp_notif.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  call
}

// seccompNotifResp is struct seccomp_notif_resp.
type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// Recorder answers a seccomp listener in the supervisor: every notification
// is a syscall the policy refused; it answers EPERM and counts it by name.
type Recorder struct {
	// file is the listener, non-blocking, so that Go's poller wakes the
	// loop: no thread sits blocked in a syscall for the run's length.
	file  *os.File
	limit int

	started  bool
	done     chan struct{}
	stopOnce sync.Once
	result   []Blocked

	mu       sync.Mutex
	counts   map[uint64]int // arch<<32 | nr
	answered int
	capped   bool
}

// NewRecorder takes over the listener descriptor (it closes it on Stop).
// A negative descriptor gives a Recorder that records nothing.
func NewRecorder(listenerFD int) *Recorder {
	r := &Recorder{limit: MaxAnswered, done: make(chan struct{}), counts: map[uint64]int{}}
	if listenerFD >= 0 {
		// A listener has no other status flags to keep: one fcntl, not
		// SetNonblock's two.
		unix.FcntlInt(uintptr(listenerFD), unix.F_SETFL, unix.O_NONBLOCK)
		r.file = os.NewFile(uintptr(listenerFD), "seccomp-listener")
	}
	return r
}

// Start answers notifications until Stop, the cap, or the end of every
// task under the filter.
func (r *Recorder) Start() {
	if r.started || r.file == nil {
		return
	}
	r.started = true
	go r.loop()
}

func (r *Recorder) loop() {
	defer close(r.done)
	// The loop closes the listener whichever way it ends (Stop, the cap,
	// every task gone): once done is closed, so is the descriptor. Past
	// the cap, the closed listener makes the kernel fail further refused
	// calls fast (ENOSYS) instead of waiting for an answer.
	defer r.file.Close()
	rc, err := r.file.SyscallConn()
	if err != nil {
		return
	}
	finished := false
	for !finished {
		err := rc.Read(func(fd uintptr) bool {
			// The poller is edge-triggered: answer everything pending,
			// then wait for the next edge.
			for {
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				if n, err := unix.Poll(pfd, 0); err != nil || n == 0 {
					return err != nil && err != unix.EINTR
				}
				if pfd[0].Revents&unix.POLLIN == 0 {
					// POLLHUP: every task under the filter is gone.
					finished = true
					return true
				}
				if !r.answer(int(fd)) {
					finished = true
					return true
				}
			}
		})
		if err != nil {
			return // Stop's deadline woke the loop
		}
	}
}

// answer takes one notification, refuses the call with EPERM and counts
// it; false once the cap is reached. The call is counted before the
// answer lets the program go on: once the program is gone, Stop reads
// a complete count without waiting for this loop.
func (r *Recorder) answer(fd int) bool {
	var req seccompNotif
	if err := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
		return err == unix.ENOENT || err == unix.EINTR
	}
	key := uint64(req.Data.Arch)<<32 | uint64(req.Data.Nr)
	r.mu.Lock()
	r.counts[key]++
	r.mu.Unlock()
	resp := seccompNotifResp{ID: req.ID, Error: -int32(unix.EPERM)}
	err := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		// The caller was killed while it waited: the call never returned.
		if r.counts[key]--; r.counts[key] == 0 {
			delete(r.counts, key)
		}
	} else {
		r.answered++
	}
	if r.answered >= r.limit {
		r.capped = true
		return false
	}
	return true
}

func ioctl(fd int, req uint, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}

// Capped reports whether the recorder reached MaxAnswered and closed the
// listener: refused calls after that failed with ENOSYS and were not counted.
func (r *Recorder) Capped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.capped
}

// Stop ends the recorder, closes the listener and returns the refused
// syscalls sorted by name: once every task under the filter is gone, all
// of them. It may be called more than once; the result is never nil.
func (r *Recorder) Stop() []Blocked {
	r.stopOnce.Do(func() {
		switch {
		case r.started:
			// An expired deadline wakes the loop, which closes the
			// listener itself. Closing it here would wait until the loop
			// had left its wait, a hand-off between goroutines (~0.2 ms
			// on a busy host), on the caller's path, which needs only
			// the counts.
			r.file.SetReadDeadline(time.Unix(0, 1))
		case r.file != nil:
			r.file.Close()
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.result = make([]Blocked, 0, len(r.counts))
		for key, n := range r.counts {
			r.result = append(r.result, Blocked{Name: syscallName(uint32(key>>32), uint32(key)), Count: n})
		}
		sort.Slice(r.result, func(i, j int) bool { return r.result[i].Name < r.result[j].Name })
	})
	return r.result
}

var nameCache sync.Map // arch<<32|nr -> string

// syscallName names a syscall number of an architecture, through libseccomp
// (the supervisor may use cgo), e.g. "ptrace"; an unknown number is "syscall_N".
func syscallName(arch, nr uint32) string {
	key := uint64(arch)<<32 | uint64(nr)
	if v, ok := nameCache.Load(key); ok {
		return v.(string)
	}
	name := fmt.Sprintf("syscall_%d", int32(nr))
	if a, ok := scmpArch(arch); ok {
		if n, err := libseccomp.ScmpSyscall(int32(nr)).GetNameByArch(a); err == nil {
			name = n
		}
	}
	nameCache.Store(key, name)
	return name
}

func scmpArch(audit uint32) (libseccomp.ScmpArch, bool) {
	for _, a := range []libseccomp.ScmpArch{libseccomp.ArchAMD64, libseccomp.ArchX86, libseccomp.ArchARM64,
		libseccomp.ArchARM, libseccomp.ArchPPC64LE, libseccomp.ArchS390X, libseccomp.ArchRISCV64} {
		if auditArch(a) == audit {
			return a, true
		}
	}
	return 0, false
}

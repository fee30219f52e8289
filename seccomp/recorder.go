package seccomp

import (
	"fmt"
	"sort"
	"sync"
	"unsafe"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Blocked is one refused syscall and how many times it was refused (report field blocked_syscalls).
type Blocked struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

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
	fd    int // the listener; -1 once closed
	wake  int // eventfd that ends the loop
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

// NewRecorder takes ownership of a listener descriptor, received from the
// process that loaded the filter (which must close its own copy).
func NewRecorder(listenerFD int) *Recorder {
	return &Recorder{fd: listenerFD, wake: -1, limit: MaxAnswered, done: make(chan struct{}), counts: map[uint64]int{}}
}

// Start answers notifications on a goroutine until Stop.
func (r *Recorder) Start() {
	if r.started || r.fd < 0 {
		return
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		// Without a way to stop a blocking poll, answer nothing: refused
		// calls then wait for Stop, which closes the listener (ENOSYS).
		return
	}
	r.wake = wake
	r.started = true
	go r.loop()
}

func (r *Recorder) loop() {
	defer close(r.done)
	fds := []unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN}, {Fd: int32(r.wake), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		ev := fds[0].Revents
		if ev&unix.POLLIN != 0 {
			if !r.answer() {
				return
			}
			continue
		}
		if ev&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			return // every task under the filter is gone
		}
	}
}

// answer receives one notification and fails it with EPERM. It reports
// false when the loop should end.
func (r *Recorder) answer() bool {
	var req seccompNotif
	if err := ioctl(r.fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
		// ENOENT: the caller died meanwhile; EINTR: try again.
		return err == unix.ENOENT || err == unix.EINTR
	}
	resp := seccompNotifResp{ID: req.ID, Error: -int32(unix.EPERM)}
	// ENOENT here too means the caller is gone: not counted then.
	err := ioctl(r.fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.counts[uint64(req.Data.Arch)<<32|uint64(req.Data.Nr)]++
		r.answered++
	}
	if r.answered >= r.limit {
		r.capped = true
		unix.Close(r.fd)
		r.fd = -1
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
// syscalls sorted by name. It may be called more than once; the result is
// never nil.
func (r *Recorder) Stop() []Blocked {
	r.stopOnce.Do(func() {
		if r.started {
			var one = [8]byte{1}
			unix.Write(r.wake, one[:])
			<-r.done
			unix.Close(r.wake)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.fd >= 0 {
			unix.Close(r.fd)
			r.fd = -1
		}
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

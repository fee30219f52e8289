package boxinit

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Proc is the box's init, a child of the supervisor.
type Proc struct {
	Pid    int
	Pidfd  int // signals go through it: never to a recycled pid
	once   sync.Once
	status syscall.WaitStatus
}

// wait reaps init (once) and returns its wait status.
func (p *Proc) Wait() syscall.WaitStatus {
	p.once.Do(func() {
		for {
			_, err := syscall.Wait4(p.Pid, &p.status, 0, nil)
			if err != syscall.EINTR {
				return
			}
		}
	})
	return p.status
}

// oneShot is set by a process that runs its boxes and then exits (the
// CLI): none of its goroutines ends locked to its thread while a box
// lives, so init may be forked from whatever thread runs the run, and no
// thread is held for the parent-death signal (see forkInit).
var OneShot atomic.Bool

// OneShotProcess declares the calling process one-shot (see oneShot). A
// long-running process (the service) must not.
func OneShotProcess() { OneShot.Store(true) }

// forkInit starts init. The parent-death signal fires when the thread
// that forked exits, not the process, and Go ends a thread when a
// goroutine exits locked to it: so in a long-running process (a service
// runs boxes for hours beside code that locks threads to change
// credentials) init is forked from one of a few "forker" goroutines, each
// locked to its thread for the life of the process (they never unlock,
// never exit). The parent-death signal then fires when the process dies,
// for every box at once, and never before. (Before them, each box held a
// new locked thread while it lived: 1.1 ms of every run's start.)
//
// netns, a network namespace's descriptor (-1: none), is one init joins
// instead of making its own: the forker enters it for the fork and
// leaves it after (forker.fork).
func ForkInit(path string, argv []string, attr *syscall.ProcAttr, netns int) (pid int, err error) {
	if OneShot.Load() {
		if netns >= 0 {
			return -1, errors.New("a network namespace kept between boxes is a service's")
		}
		return syscall.ForkExec(path, argv, attr)
	}
	forkersOnce.Do(startForkers)
	req := forkRequest{path: path, argv: argv, attr: attr, netns: netns, done: make(chan forkResult, 1)}
	forkRequests <- req
	r := <-req.done
	return r.pid, r.err
}

// numForkers is how many threads fork inits: a fork is short (vfork until
// the exec), so two keep a service's concurrent starts from queueing.
const numForkers = 2

type forkRequest struct {
	path  string
	argv  []string
	attr  *syscall.ProcAttr
	netns int
	done  chan forkResult
}

type forkResult struct {
	pid int
	err error
}

var (
	forkersOnce  sync.Once
	forkRequests = make(chan forkRequest)
)

func startForkers() {
	for i := 0; i < numForkers; i++ {
		go func() {
			runtime.LockOSThread() // for good: see forkInit
			var f forker
			f.host, f.hostErr = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			for req := range forkRequests {
				req.done <- f.fork(req)
			}
		}()
	}
}

// forker is the state of a forker's thread: its network namespace is
// the process's unless a fork into a box's left it elsewhere (away).
type forker struct {
	host    int // the process's network namespace
	hostErr error
	away    bool
}

// fork forks req's init in the network namespace it asks for (the
// process's when none), entering it first when the thread is not there.
// Returning at once spares the next fork into the process's namespace a
// setns; a thread that could not return (away) does so before that fork.
func (f *forker) fork(req forkRequest) forkResult {
	if req.netns >= 0 || f.away {
		target := req.netns
		if target < 0 {
			if f.hostErr != nil {
				return forkResult{-1, fmt.Errorf("open the process's network namespace: %w", f.hostErr)}
			}
			target = f.host
		}
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			return forkResult{-1, fmt.Errorf("enter the box's network namespace: %w", err)}
		}
		f.away = req.netns >= 0
	}
	pid, err := syscall.ForkExec(req.path, req.argv, req.attr)
	if f.away && f.hostErr == nil && unix.Setns(f.host, unix.CLONE_NEWNET) == nil {
		f.away = false
	}
	return forkResult{pid, err}
}

func (p *Proc) Kill() { unix.PidfdSendSignal(p.Pidfd, unix.SIGKILL, nil, 0) }

// alive tells whether init still runs: its pidfd turns readable when it
// ends (a zombie too).
func (p *Proc) Alive() bool {
	fds := []unix.PollFd{{Fd: int32(p.Pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

func (p *Proc) Close() { unix.Close(p.Pidfd) }

func DescribeWait(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by signal " + ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

package isolate

// #cgo CFLAGS: -I${SRCDIR}/boxinit
// #include "early.h"
import "C"

import (
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// earlyInit is a box's init the isolate command started before the Go
// runtime (init_main.c, early.h): its user, PID, mount, IPC, UTS and
// network namespaces are made while Go starts and the run is prepared,
// and it is no exec of its own. Its PID 1 waits for its ID maps, then for
// the plan, whose box part brings the descriptors a spawned init gets at
// its exec (plan.placeFD), and whose command part brings the program's
// streams (plan.stdio).
type earlyInit struct {
	pid, pidfd int
	flags      uintptr
	ctl        *os.File // the control socket (the plan)
	status     *os.File // init's status messages
	maps       *os.File // the ID maps, written once and closed
}

var earlyOnce sync.Once

// takeEarlyInit returns the early init, to the first caller alone; nil
// when none was started.
func takeEarlyInit() (e *earlyInit) {
	earlyOnce.Do(func() {
		c := C.isolate_early_init
		if c.pid <= 0 {
			return
		}
		e = &earlyInit{pid: int(c.pid), pidfd: int(c.pidfd), flags: uintptr(c.flags),
			ctl:    os.NewFile(uintptr(c.ctl), "init-control"),
			status: os.NewFile(uintptr(c.status), "init-status"),
			maps:   os.NewFile(uintptr(c.maps), "init-maps")}
	})
	return e
}

// DiscardEarlyInit ends the early init if no run took it (a command that
// failed before its run, or ran none): closing its maps pipe ends it, and
// it is reaped.
func DiscardEarlyInit() {
	if e := takeEarlyInit(); e != nil {
		e.discard()
	}
}

func (e *earlyInit) discard() {
	e.maps.Close()
	e.ctl.Close()
	e.status.Close()
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(e.pid, &ws, 0, nil); err != syscall.EINTR {
			break
		}
	}
	unix.Close(e.pidfd)
}

// earlyInitFor returns the early init for a run whose init is made with
// flags, or nil: none was started, or this run cannot take it (it would
// need other namespaces, or it builds a box for a pool or a session, or
// without root), which ends it. (Only buildBox sends an early init's
// descriptors and streams.)
func (s *supervisor) earlyInitFor(flags uintptr) *earlyInit {
	if !boxinit.OneShot.Load() {
		return nil
	}
	e := takeEarlyInit()
	if e == nil {
		return nil
	}
	if e.flags != flags || s.ahead || s.session || s.host.rootless != nil {
		e.discard()
		return nil
	}
	return e
}

// adoptInit makes the early init the run's init: it writes its ID maps,
// and keeps what a spawned init gets at its exec for the plan: boxFiles
// (init's descriptors from fdExtra on) for the box part, the program's
// streams for the command part. They stay open (s.closers) until the
// command part is sent.
func (s *supervisor) adoptInit(e *earlyInit, boxFiles, streams []*os.File, statusR *os.File) error {
	s.init = &boxinit.Proc{Pid: e.pid, Pidfd: e.pidfd}
	s.msgs = make(chan boxinit.Message, 4)
	go readMessages(statusR, s.msgs)
	s.boxFiles, s.streams = boxFiles, streams
	if err := s.makeStaging(); err != nil {
		e.maps.Close()
		return err
	}
	_, err := e.maps.WriteString(idMaps(FirstUID + s.lock.id))
	if cerr := e.maps.Close(); err == nil {
		err = cerr
	}
	s.timer.mark("early-init")
	if err != nil {
		// Init failed first (its namespaces, most likely) and said why.
		return s.sendFailed("write the box's ID maps", err)
	}
	return nil
}

package isolate

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate/hostfs"
)

// teardown copies files out, lets init exit (the kernel then drops the
// namespaces and every mount), removes the cgroup and frees the box id.
//
// A box the pool built ahead never gave init the program's streams: once
// init has reported the program's exit, the output is complete, and the
// box ends in the background, off the caller's path (pool.go).
func (s *supervisor) teardown() {
	s.stopEgress()
	closeAll(s.closers)
	if s.ownImage != nil {
		s.ownImage.Close()
	}
	accounted := s.report.Status != ""
	pool := s.host.pool.Load()
	// The next box of a persistent box id is built once this one has
	// ended (pool_ahead.go), unless it was built while this one ran.
	var next *aheadBox
	if s.next == nil {
		next = pool.aheadFor(s)
	}
	// A kept network namespace goes on with the next box, or goes (the
	// box's processes hold it until they are gone).
	s.netns.Close()
	s.netns = nil
	if s.claimed != nil && accounted && s.init != nil {
		if len(s.spec.CopyOut) > 0 {
			s.copyOut()
		}
		s.collect()
		s.timer.mark("collect")
		end := s.detachBox()
		switch {
		case s.next != nil:
			s.next.prev <- prevRun{ok: s.report.Status != StatusXX, ended: pool.endAfterCaller(end, endAfter(s.ctx), s.next.wanted)}
			s.next = nil
		case next != nil && pool.startAhead(next, end, endAfter(s.ctx)):
		case s.spec.BoxID >= 0:
			// The id's next run must find it free: no box was built
			// ahead for it to wait for.
			reportEnd(end())
		default:
			pool.endInBackground(end, endAfter(s.ctx))
		}
		return
	}
	closeAll(s.placement)
	// Once init has reported the program's exit, it has reaped every
	// process of the box: the cgroup goes while init ends.
	if accounted {
		s.removeCgroup()
	}
	if s.init != nil && len(s.spec.CopyOut) > 0 && accounted {
		s.copyOut()
	}
	s.endInit()
	s.collect()
	s.timer.mark("wait-init")
	s.removeCgroup()
	if s.lock != nil {
		s.lock.release()
	}
	if next != nil {
		pool.startAhead(next, nil, endAfter(s.ctx))
	}
	if s.next != nil {
		s.next.prev <- prevRun{} // (this run failed)
		s.next = nil
	}
}

// endInit closes init's control socket, which ends init, and reaps it
// (killing it if it does not end in time).
func (s *supervisor) endInit() {
	if s.ctl != nil {
		s.ctl.Close()
	}
	if s.init == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(killGrace):
			s.init.Kill()
		}
	}()
	s.init.Wait()
	close(done)
	s.init.Close()
	// Init is gone: its status pipe ends, and readMessages closes it and
	// then the channel. Waiting for that leaves no descriptor of the run
	// open after it.
	if s.msgs != nil {
		for range s.msgs {
		}
	}
}

// detachBox hands what is left of the box (init, its cgroup, the box id)
// to the returned function, which ends it: the report no longer changes.
func (s *supervisor) detachBox() func() error {
	end := &supervisor{host: s.host, spec: s.spec, initLink: s.initLink, cg: s.cg, lock: s.lock, placement: s.placement, timer: newStageTimer(), report: &Report{}}
	s.init, s.ctl, s.cg, s.lock, s.placement = nil, nil, nil, nil, nil
	return func() error {
		closeAll(end.placement)
		var err error
		if end.cg != nil {
			err = end.cg.Destroy()
		}
		end.endInit()
		if end.lock != nil {
			end.lock.release()
		}
		return err
	}
}

// collect takes what the report still needs once the program is gone:
// blocked syscalls, captured output.
func (s *supervisor) collect() {
	s.closeCopyDst()
	s.closeBinds()
	if s.rec != nil {
		s.report.BlockedSyscalls = s.rec.Stop()
	}
	if s.notify != nil {
		s.notify.Close()
	}
	if s.stdinW != nil {
		s.stdinW.Close() // ends a copy the program did not read to its end
	}
	if s.stdout != nil {
		s.report.Stdout, s.report.StdoutTruncated = s.stdout.result()
	}
	if s.stderr != nil {
		s.report.Stderr, s.report.StderrTruncated = s.stderr.result()
	}
}

// removeCgroup removes the box's cgroup (once), killing anything left in
// it.
func (s *supervisor) removeCgroup() {
	if s.cg == nil {
		return
	}
	if err := s.cg.Destroy(); err != nil && s.report.Status != StatusXX {
		s.report.Status = StatusXX
		s.report.Message = "teardown: " + err.Error()
	}
	s.cg = nil
	s.timer.mark("cgroup-remove")
}

// copyOut copies the --copy-out files to the host, within the run's
// bounds. A copy that fails makes an OK run XX (copyOutFailed): its
// files are missing or partial.
func (s *supervisor) copyOut() {
	root, err := s.openBoxRoot()
	if err != nil {
		s.copyOutFailed(fmt.Errorf("--copy-out: %w", err))
		return
	}
	budget := hostfs.CopyOutBudget(s.spec.CopyOutLimit, s.spec.TmpSize)
	done := hostfs.GoFSThread(func(t *hostfs.FSThread) error {
		defer unix.Close(root)
		var failed []string
		for i, c := range s.spec.CopyOut {
			if c.Sink != nil {
				if err := hostfs.SinkOut(t, root, c.From, c.Sink, s.boxCred()); err != nil {
					failed = append(failed, "copy out "+hostfs.BoxPath(c.From)+": "+err.Error())
				}
				continue
			}
			if err := hostfs.CopyOut(t, root, c.From, s.copyDst[i], s.boxCred(), s.caller(), budget); err != nil {
				failed = append(failed, "--copy-out "+c.From+": "+err.Error())
			}
		}
		if len(failed) > 0 {
			return errors.New(strings.Join(failed, "; "))
		}
		return nil
	})
	// The budget's deadline stops a slow copy between reads; this one a
	// read that never returns (the box's descriptors die with init).
	timeout := time.NewTimer(hostfs.CopyTimeout + killGrace)
	defer timeout.Stop()
	select {
	case err = <-done:
	case <-timeout.C:
		err = fmt.Errorf("--copy-out did not finish within %v", hostfs.CopyTimeout+killGrace)
	}
	if err != nil {
		s.copyOutFailed(err)
	}
}

// copyOutFailed records a failed copy-out. A run that was OK becomes XX:
// what the caller asked for is missing. A run that already failed keeps
// its verdict (a program that timed out or crashed often leaves no
// output file; that is not the sandbox failing), and the message says
// both.
func (s *supervisor) copyOutFailed(err error) {
	if s.report.Status == StatusOK {
		s.report.Status = StatusXX
	}
	if s.report.Message == "" {
		s.report.Message = err.Error()
	} else {
		s.report.Message = appendMsg(err.Error(), "the program: "+s.report.Message)
	}
}

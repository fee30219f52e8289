package isolate

// Boxes built ahead for a persistent box id (the ioi form's `--run` on an
// initialised box, handed to the service). Judges run a box's tests one
// after another, so while a run of box N runs in a box the pool built
// (once it has ended, for a run of a box of its own) the pool builds the
// next box of N, with that run's box part: the same box id (its uid),
// image, tmp size, network, box/ directory, binds and syscall policy. The
// next run of N takes it when its own box part is the same and each
// directory it binds is the very directory the box bound (the box holds
// them open, so an equal device and inode is the same directory) and the
// id is free; otherwise the box built ahead is torn down and the run
// builds its own. Until a run claims it, the box holds neither the id's
// run lock nor its cgroup (lockAhead). It joins the network namespace the
// id's boxes share (netns.go), and may be claimed once the last run has
// ended and its box has gone (a failed run's next box goes too). Binds are
// bind mounts: what box/ and the bound directories hold is what they hold
// at the run. The box is still never used for two runs, and takes the
// run's limits, streams and command as any pooled box does.

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/seccomp"
)

// aheadIdle is how long a box built ahead for a box id waits for the
// id's next run.
const aheadIdle = 5 * time.Second

// maxAhead bounds the boxes built ahead for box ids, besides the pool's
// Max: each is an idle init and its mounts, and a judge's boxes are
// a few per CPU.
const maxAhead = 32

// lockAhead holds box id spec.BoxID for a box built ahead, apart from its
// runs: a box built ahead holds no run's lock (a run of the id that was
// not handed to the service takes it as if no box waited) and has no
// cgroup (named after the id, made when a run claims the box). It only
// keeps two boxes from being built ahead for one id. The id's boxes built
// ahead one after another pass it on (aheadBox.lock): held while the run
// that claimed one runs, it is not made and removed again for each run.
func (s *supervisor) lockAhead() error {
	l, ok, err := tryLock("ahead-" + strconv.Itoa(s.spec.BoxID))
	if err == nil && !ok {
		err = fmt.Errorf("box %d is being built ahead elsewhere", s.spec.BoxID)
	}
	if err != nil {
		return err
	}
	s.lock = &boxLock{id: s.spec.BoxID, lock: l}
	return nil
}

// aheadBox is the box built (or being built) ahead for a box id.
type aheadBox struct {
	ready chan struct{} // closed once b and err are set
	// wanted is closed by the run that waits for the box: it is built
	// at once, not once the last run's caller has its answer.
	wanted chan struct{}
	b      *builtBox
	err    error
	spec   Spec          // the box part it was built with
	binds  []*bindSource // the bind sources it bound (opened with the run's caller's rights), held open
	dir    *os.File      // spec.BoxDir, held open (O_PATH)
	// policy is the syscall policy its box was prepared with.
	policy *seccomp.Program
	built  time.Time
	// lock is the id's ahead lock, passed on by the run that claimed the
	// box before, until the build takes it (nil: the build takes it anew).
	lock *lock
	// netns is the network namespace the run that claimed the box before
	// had, until the build takes it (netns.go); nil: the build makes one,
	// when its box part has a network namespace of its own.
	netns *boxNetns
	// prev, for a box built while the run of the id's last box runs
	// (buildNext), is how that run ended, sent once by its teardown.
	prev chan prevRun
}

// prevRun is how the run of the box before a box built by buildNext
// ended.
type prevRun struct {
	ok    bool            // accounted, not XX: the next box serves the id's next run
	ended <-chan struct{} // closed once its box has ended
}

// aheadable says whether a run of spec gets a box built ahead for its
// box id once it ends: a persistent box of the host image.
func aheadable(sp *Spec) bool {
	return sp.BoxID >= 0 && sp.BoxDir != "" && sp.BoxMount == nil && sp.ImageFile == "" &&
		sp.ImageMount == nil && sp.ImageTree == nil && sp.ImageDir == "/"
}

// sameBoxPart says whether a box built for a's box part serves a run of
// b: everything boxPlan and startInit read from the spec.
func sameBoxPart(a, b *Spec) bool {
	return a.BoxID == b.BoxID && a.ImageDir == b.ImageDir && a.TmpSize == b.TmpSize &&
		a.HostNet == b.HostNet && (a.Egress == nil) == (b.Egress == nil) && a.NoSyscallReport == b.NoSyscallReport && a.BoxDir == b.BoxDir && policyName(a) == policyName(b) &&
		reflect.DeepEqual(a.Binds, b.Binds)
}

// sameFile says whether two open files are the same inode.
func sameFile(a, b *os.File) bool {
	var x, y unix.Stat_t
	if unix.Fstat(int(a.Fd()), &x) != nil || unix.Fstat(int(b.Fd()), &y) != nil {
		return false
	}
	return x.Dev == y.Dev && x.Ino == y.Ino
}

// serves says whether box a, built ahead, may take the run of s: the same
// box part, the same directories bound, box/ still the directory it was.
func (a *aheadBox) serves(s *supervisor) bool {
	if a.b == nil || !a.b.s.init.Alive() || !sameBoxPart(&a.spec, s.spec) || len(a.binds) != len(s.binds) {
		return false
	}
	for i, src := range s.binds {
		if (src == nil) != (a.binds[i] == nil) || (src != nil && !sameFile(src.Source, a.binds[i].Source)) {
			return false
		}
	}
	return a.boxThere()
}

// close tears the box down (if it was built) and lets go of its sources.
func (a *aheadBox) close() {
	if a.b != nil {
		a.b.s.teardown()
	}
	closeBindSources(a.binds)
	if a.dir != nil {
		a.dir.Close()
	}
	if a.lock != nil {
		a.lock.release()
	}
	a.netns.Close()
}

// claimAhead takes the box built ahead for the run's box id, waiting for
// its build, or nil: then no box of the id's is left (a box that does not
// serve the run is torn down, freeing the id). Nil-safe.
func (p *pool) claimAhead(s *supervisor) *builtBox {
	if p == nil || s.spec.BoxID < 0 {
		return nil
	}
	p.mu.Lock()
	a := p.ahead[s.spec.BoxID]
	delete(p.ahead, s.spec.BoxID)
	p.mu.Unlock()
	if a == nil {
		return nil
	}
	close(a.wanted)
	<-a.ready
	if a.err == nil && a.serves(s) {
		// The run's own hold of the id, as a box it built would take:
		// the id's box for the run (and its uid) is this one alone.
		l, free, err := tryLockBox(s.host.lockDir(), s.spec.BoxID)
		if err == nil && free {
			b := a.b
			a.b = nil
			a.close()
			// The ahead lock stays with the run, for the id's next box.
			s.aheadLock = b.s.lock.lock
			b.s.lock = l
			return b
		}
	}
	a.close()
	return nil
}

// aheadFor prepares the next box of the run s's box id, or nil for a run
// that gets none (no pool, not a persistent box, a run that failed): it
// holds the run's box directory, and the id's ahead lock the run kept
// (which the run lets go of when it gets none). Start it with startAhead.
// Nil-safe.
func (p *pool) aheadFor(s *supervisor) *aheadBox {
	return p.nextBox(s, s.report.Status != "" && s.report.Status != StatusXX)
}

// nextBox is aheadFor for a run that ended ok (or runs).
func (p *pool) nextBox(s *supervisor, ok bool) *aheadBox {
	held := s.aheadLock
	s.aheadLock = nil
	var dir *os.File
	ok = ok && p != nil && aheadable(s.spec)
	if ok {
		var err error
		dir, err = os.OpenFile(s.spec.BoxDir, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		ok = err == nil
	}
	if !ok {
		if held != nil {
			held.release()
		}
		return nil
	}
	spec := *s.spec
	spec.Command, spec.CopyIn, spec.CopyOut, spec.Env = nil, nil, nil, nil
	a := &aheadBox{ready: make(chan struct{}), wanted: make(chan struct{}), spec: spec, dir: dir, policy: s.policy, lock: held,
		netns: s.netns}
	s.netns = nil
	return a
}

// buildNext starts building the next box of the id of s, a run of a
// claimed box that has started: built while the run runs, the box waits
// for the run's teardown (prev) and the end of its box before the id's
// next run may claim it. Nil when none is built (as aheadFor).
func (p *pool) buildNext(s *supervisor) *aheadBox {
	a := p.nextBox(s, true)
	if a == nil {
		return nil
	}
	a.prev = make(chan prevRun, 1)
	if !p.startAhead(a, nil, nil) {
		return nil
	}
	return a
}

// endAfterCaller ends a claimed box (end) once after is closed (see
// awaitCaller; wanted: the id's next run waits for the box's end) and
// returns a channel closed once it has ended. Nil-safe: with no pool, or
// a stopped one, end runs at once.
func (p *pool) endAfterCaller(end func() error, after, wanted <-chan struct{}) <-chan struct{} {
	ended := make(chan struct{})
	background := p != nil
	if background {
		p.mu.Lock()
		if background = !p.stopped; background {
			p.wg.Add(1)
		}
		p.mu.Unlock()
	}
	if !background {
		reportEnd(end())
		close(ended)
		return ended
	}
	go func() {
		defer p.wg.Done()
		p.awaitCaller(after, wanted)
		reportEnd(end())
		close(ended)
	}()
	return ended
}

// startAhead builds a in the background once after (see EndAfter) is
// closed and end (the end of the run's box; nil: it has ended) has run.
// It reports false, having done nothing, when the pool has stopped or
// holds maxAhead of them: the caller then ends the box itself.
func (p *pool) startAhead(a *aheadBox, end func() error, after <-chan struct{}) bool {
	p.mu.Lock()
	if p.stopped || len(p.ahead) >= maxAhead {
		p.mu.Unlock()
		a.close()
		return false
	}
	if old := p.ahead[a.spec.BoxID]; old != nil {
		// Never claimed: its id's run was not this one's. Gone all the
		// same.
		go func() { <-old.ready; old.close() }()
	}
	p.ahead[a.spec.BoxID] = a
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		defer close(a.ready)
		// As a claimed box's end (goEnd): off the caller's path, unless
		// the id's next run waits for it (the caller's next command
		// of the same request).
		p.awaitCaller(after, a.wanted)
		if end != nil {
			reportEnd(end())
		}
		select {
		case <-p.stop:
			a.err = errPoolStopped
			return
		default:
		}
		// A judge cleans its box up once it has its last run's answer:
		// then there is nothing to build for, and a build that failed
		// because the box went under it failed for that.
		if !a.boxThere() {
			a.err = errBoxGone
			return
		}
		held, netns := a.lock, a.netns
		a.lock, a.netns = nil, nil // the build's now: its teardown lets go of them
		a.b, a.binds, a.err = p.buildFor(&a.spec, a.policy, held, netns)
		a.built = time.Now()
		if a.err != nil && a.boxThere() {
			fmt.Fprintf(os.Stderr, "isolate: pool: build box %d ahead: %v\n", a.spec.BoxID, a.err)
		}
		if a.err == nil {
			if err := a.afterLastRun(p.stop, netns != nil); err != nil {
				a.b.s.teardown()
				a.b, a.err = nil, err
			}
		}
	}()
	return true
}

// afterLastRun waits, for a box built while the id's last run ran (prev),
// until that run has ended and its box has gone; then a network namespace
// the box took from that run (kept) must hold nothing of it (every process
// of the run is gone by then). An error: the box must go.
func (a *aheadBox) afterLastRun(stop <-chan struct{}, kept bool) error {
	if a.prev != nil {
		var r prevRun
		select {
		case r = <-a.prev:
		case <-stop:
			return errPoolStopped
		}
		if !r.ok {
			return errLastRunFailed
		}
		select {
		case <-r.ended:
		case <-stop:
			return errPoolStopped
		}
	}
	if kept && !a.b.s.netns.unused() {
		return errNetnsUsed
	}
	return nil
}

var (
	errPoolStopped   = fmt.Errorf("the pool stopped")
	errBoxGone       = fmt.Errorf("the box was cleaned up")
	errNetnsUsed     = fmt.Errorf("the last run left sockets in the network namespace")
	errLastRunFailed = fmt.Errorf("the id's last run failed")
)

// boxThere says whether the box directory a was built for is still the
// one its path names (not cleaned up, nor made anew).
func (a *aheadBox) boxThere() bool {
	cur, err := os.OpenFile(a.spec.BoxDir, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer cur.Close()
	return sameFile(cur, a.dir)
}

// reapAhead tears down the boxes built ahead that waited longer than
// aheadIdle, or all of them with all (the pool stopping); p.mu held. The
// teardowns run once p.mu is released: call the function returned.
func (p *pool) reapAhead(now time.Time, all bool) func() {
	var old []*aheadBox
	for id, a := range p.ahead {
		select {
		case <-a.ready:
		default:
			if !all {
				continue
			}
		}
		if all || now.Sub(a.built) > aheadIdle {
			old = append(old, a)
			delete(p.ahead, id)
		}
	}
	return func() {
		for _, a := range old {
			<-a.ready
			a.close()
		}
	}
}

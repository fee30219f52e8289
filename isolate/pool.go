package isolate

// The pool of boxes built ahead (a long-running process: the service).
// A box is built up to the point where init waits for its one command:
// box id held, cgroup made (no limits yet), namespaces and file system
// built, init said "ready". A run whose box part matches a ready box
// claims it, sets its limits, sends its command and streams; it is never
// used again, and ends in the background once the run has its report and,
// when the front end says so (EndAfter), once the caller has its answer.
// A run with no ready box builds its own (the one-shot path): it never
// waits on a build.

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/seccomp"
)

// PoolConfig sizes the pool.
type PoolConfig struct {
	// Max bounds the boxes ready or being built, all keys together; 0
	// disables the pool.
	Max int
	// Builders is how many boxes are built at once (default 1: on a
	// small machine builds compete with the runs for the CPUs).
	Builders int
	// Idle is how long a key nobody asked for keeps its ready boxes
	// (default 60 s). The keys warmed at start keep one.
	Idle time.Duration
	// Warm are images whose boxes are built at start ("host", a built
	// image's name, or a directory), with the default tmp size and
	// network; nil: the host image.
	Warm []string
}

// demandWindow is how far back claims count as demand: a key keeps
// ready the boxes claimed (or missed) in the last window, and one more.
const demandWindow = time.Second

// poolKey is what a box's build depends on: a request matches a ready box
// when these are equal, whatever its command, limits and streams.
type poolKey struct {
	imageDir string // the resolved tree ("/": the host's)
	tmpSize  int64
	hostNet  bool
}

// poolSlot are the boxes of one key.
type poolSlot struct {
	key      poolKey
	ready    []*builtBox
	building int
	wanted   []time.Time // claims and misses within demandWindow
	lastWant time.Time
	warm     bool         // keeps one box however idle
	treeName string       // a built image's name: the pool holds its tree
	tree     *rootfs.Tree // held while the slot exists
}

// builtBox is a box built ahead: the supervisor that built it, stopped
// where init waits for the command part.
type builtBox struct {
	s   *supervisor
	box *pendingBox
}

// pool is the Host's pool (StartPool).
type pool struct {
	h        *Host
	cfg      PoolConfig
	mu       sync.Mutex
	slots    map[poolKey]*poolSlot
	ahead    map[int]*aheadBox // by box id (pool_ahead.go)
	total    int               // ready and being built
	building int
	stopped  bool
	stop     chan struct{}
	wg       sync.WaitGroup // builds, background teardowns, the janitor
	// busyAt is when a run last claimed a box or had its answer: the
	// pool's housekeeping waits for a quiet moment (awaitQuiet).
	busyAt time.Time
}

// The pool's housekeeping (the end of a claimed box, and the build of a
// box for a key that still has one ready) waits until no run claimed a
// box or had its answer for quietFor, and at most maxDefer: a box's end
// and a build are a few milliseconds of the CPUs' and the kernel's
// (namespaces, mounts, cgroups) work: run at once, they make a request
// sent right after another's answer take 1.6-1.8 times as long as one
// sent 10 ms later (isolate bench --service). Under a steady stream of
// requests it runs maxDefer late, so that ended boxes do not pile up.
const (
	quietFor = 2 * time.Millisecond
	maxDefer = 20 * time.Millisecond
)

// StartPool starts building boxes ahead for h's runs (see pool.go). A
// second call, or Max 0, does nothing.
func (h *Host) StartPool(cfg PoolConfig) error {
	if cfg.Max <= 0 {
		return nil
	}
	if cfg.Builders <= 0 {
		cfg.Builders = 1
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 60 * time.Second
	}
	if cfg.Warm == nil {
		cfg.Warm = []string{"host"}
	}
	p := &pool{h: h, cfg: cfg, slots: map[poolKey]*poolSlot{}, ahead: map[int]*aheadBox{}, stop: make(chan struct{})}
	for _, name := range cfg.Warm {
		s := Defaults()
		if err := resolveImage(&s, name); err != nil {
			p.closeTrees()
			return fmt.Errorf("pool: %w", err)
		}
		if s.ImageFile != "" {
			p.closeTrees()
			return fmt.Errorf("pool: image %s cannot be pooled (a squashfs file is mounted per run)", name)
		}
		sl := p.slot(poolKey{imageDir: s.ImageDir, tmpSize: s.TmpSize, hostNet: s.HostNet}, s.ImageTree)
		s.ImageTree.Close()
		sl.warm, sl.lastWant = true, time.Now()
	}
	if !h.pool.CompareAndSwap(nil, p) {
		p.closeTrees()
		return nil
	}
	p.wg.Add(1)
	go p.janitor()
	p.mu.Lock()
	p.fill()
	p.mu.Unlock()
	return nil
}

// PoolReady is how many boxes wait for a command.
func (h *Host) PoolReady() int {
	p := h.pool.Load()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, sl := range p.slots {
		n += len(sl.ready)
	}
	return n
}

// StopPool tears down every waiting box, and waits for the builds and
// the background teardowns of claimed boxes. Runs after it build their
// own boxes.
func (h *Host) StopPool() {
	p := h.pool.Swap(nil)
	if p == nil {
		return
	}
	p.mu.Lock()
	p.stopped = true
	close(p.stop)
	var ready []*builtBox
	for _, sl := range p.slots {
		ready = append(ready, sl.ready...)
		sl.ready = nil
	}
	reap := p.reapAhead(time.Now(), true)
	p.mu.Unlock()
	for _, b := range ready {
		b.s.teardown()
	}
	reap()
	p.wg.Wait()
	p.closeTrees()
}

// key is the pool key of a prepared run, or false for a run whose box
// must be its own: binds, a persistent or given box, a mounted image, an
// image directory given by path (a box built ahead would hold what the
// directory held then: only host and built images, whose trees do not
// change under a held name, are pooled).
func (p *Prepared) key() (poolKey, bool) {
	sp := p.spec
	// (A box with an allowlist has its proxy's listener made as it is
	// built: never one built ahead for anyone.)
	if sp.BoxID >= 0 || sp.BoxDir != "" || sp.BoxMount != nil || len(sp.Binds) > 0 || sp.Egress != nil ||
		sp.ImageFile != "" || sp.ImageMount != nil || sp.ImageDir == "" ||
		(sp.ImageTree == nil && sp.ImageDir != "/") {
		return poolKey{}, false
	}
	return poolKey{imageDir: sp.ImageDir, tmpSize: sp.TmpSize, hostNet: sp.HostNet}, true
}

// claim takes a ready box for the run, or nil (nil-safe: no pool). Either
// way the run's key counts as demand. After a miss building resumes at
// once; after a claim once the claimed box has ended (endInBackground),
// so that the build does not compete with the run for the CPUs.
func (p *pool) claim(pr *Prepared) *builtBox {
	if p == nil {
		return nil
	}
	k, ok := pr.key()
	if !ok {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	sl := p.slots[k]
	if sl == nil {
		sl = p.slot(k, pr.spec.ImageTree)
	}
	now := time.Now()
	sl.wanted = append(sl.wanted, now)
	sl.lastWant = now
	for n := len(sl.ready); n > 0; n-- {
		b := sl.ready[n-1]
		sl.ready = sl.ready[:n-1]
		p.total--
		if b.s.init.Alive() {
			p.busyAt = now
			return b
		}
		// Killed while it waited (by the OOM killer, by an operator):
		// never handed out.
		p.goEnd(func() error { b.s.teardown(); return nil }, nil)
	}
	p.fill()
	return nil
}

// slot makes the slot of key k (p.mu held, or p not yet shared). A built
// image's slot holds the image's tree (holdTree) while it exists:
// `cleanup --images` leaves it alone while boxes may be built from it.
func (p *pool) slot(k poolKey, tree *rootfs.Tree) *poolSlot {
	sl := &poolSlot{key: k}
	if tree != nil {
		sl.treeName = tree.Name
	}
	p.slots[k] = sl
	return sl
}

// target is how many boxes a slot should have ready or in the making.
func (p *pool) target(sl *poolSlot, now time.Time) int {
	i := 0
	for i < len(sl.wanted) && now.Sub(sl.wanted[i]) > demandWindow {
		i++
	}
	sl.wanted = sl.wanted[i:]
	n := 0
	if len(sl.wanted) > 0 || sl.warm || now.Sub(sl.lastWant) < p.cfg.Idle {
		n = len(sl.wanted) + 1
	}
	return min(n, p.cfg.Max)
}

// fill starts builds for the slots below their target, most wanted first,
// within Max and Builders (p.mu held).
func (p *pool) fill() {
	if p.stopped {
		return
	}
	now := time.Now()
	type need struct {
		sl      *poolSlot
		deficit int
	}
	var needs []need
	for _, sl := range p.slots {
		if d := p.target(sl, now) - len(sl.ready) - sl.building; d > 0 {
			needs = append(needs, need{sl, d})
		}
	}
	sort.Slice(needs, func(i, j int) bool { return needs[i].deficit > needs[j].deficit })
	for _, n := range needs {
		for i := 0; i < n.deficit && p.building < p.cfg.Builders; i++ {
			if p.total >= p.cfg.Max && !p.evictFor(n.sl) {
				break
			}
			n.sl.building++
			p.building++
			p.total++
			p.wg.Add(1)
			go p.build(n.sl)
		}
	}
}

// evictFor makes room for a box of sl, wanted lately, by tearing down a
// ready box of the key wanted longest ago and not lately (p.mu held; the
// slots' demand pruned by target).
func (p *pool) evictFor(sl *poolSlot) bool {
	if len(sl.wanted) == 0 {
		return false
	}
	var victim *poolSlot
	for _, o := range p.slots {
		if o != sl && len(o.ready) > 0 && len(o.wanted) == 0 && (victim == nil || o.lastWant.Before(victim.lastWant)) {
			victim = o
		}
	}
	if victim == nil {
		return false
	}
	b := victim.ready[0]
	victim.ready = victim.ready[1:]
	p.total--
	p.goEnd(func() error { b.s.teardown(); return nil }, nil)
	return true
}

// build builds one box for sl in the background: at once while sl has
// none ready, else in a quiet moment.
func (p *pool) build(sl *poolSlot) {
	defer p.wg.Done()
	p.mu.Lock()
	spare := len(sl.ready) > 0
	p.mu.Unlock()
	if spare {
		p.awaitQuiet()
	}
	b, err := p.buildBox(sl)
	p.mu.Lock()
	sl.building--
	p.building--
	if err != nil || p.stopped {
		p.total--
		p.mu.Unlock()
		if b != nil {
			b.s.teardown()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "isolate: pool: build a box for %s: %v\n", sl.key.imageDir, err)
			// Not at once again: a host that cannot build boxes now
			// would spin.
			select {
			case <-p.stop:
			case <-time.After(time.Second):
			}
			p.mu.Lock()
			p.fill()
			p.mu.Unlock()
		}
		return
	}
	sl.ready = append(sl.ready, b)
	p.fill()
	p.mu.Unlock()
}

// buildBox builds a box of sl's key up to init's "ready".
func (p *pool) buildBox(sl *poolSlot) (*builtBox, error) {
	spec := Defaults()
	policy, err := p.h.policy(policyName(&spec), false)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp policy: %w", err)
	}
	if err := p.holdTree(sl); err != nil {
		return nil, err
	}
	spec.ImageDir, spec.TmpSize, spec.HostNet = sl.key.imageDir, sl.key.tmpSize, sl.key.hostNet
	b, _, err := p.buildFor(&spec, policy, nil, nil)
	return b, err
}

// keepsNetns says whether the network namespace of a run of spec's box
// id is kept for the id's next boxes (netns.go): a box with a network of
// its own and nothing listening in it (an allowlist's listener), built by
// root, of a service's. Nil-safe.
func (p *pool) keepsNetns(spec *Spec) bool {
	return p != nil && aheadable(spec) && !spec.HostNet && spec.Egress == nil && p.h.rootless == nil
}

// buildFor builds a box of spec's box part, with the syscall policy
// given, up to init's "ready", and returns its bind sources (opened with
// spec.Caller's rights) for the caller to close. held, if not nil, is the
// box id's ahead lock, already held (pool_ahead.go): the box takes it, and
// lets go of it as it would of its own. netns, if not nil, is the network
// namespace the box joins (netns.go), the box's from then on; a box of a
// box id makes one to keep otherwise.
func (p *pool) buildFor(spec *Spec, policy *seccomp.Program, held *lock, netns *boxNetns) (*builtBox, []*bindSource, error) {
	s := &supervisor{initLink: initLink{ctx: context.Background()}, host: p.h, spec: spec, policy: policy,
		timer: newStageTimer(), ahead: true, report: &Report{BoxID: -1, BlockedSyscalls: []seccomp.Blocked{}}, netns: netns}
	if held != nil {
		s.lock = &boxLock{id: spec.BoxID, lock: held}
	}
	var box *pendingBox
	err := s.openBinds()
	if err == nil && s.lock == nil {
		if spec.BoxID >= 0 {
			err = s.lockAhead()
		} else {
			err = s.lockBox()
		}
	}
	if err == nil {
		if spec.BoxID < 0 {
			s.createCgroup()
		}
		if err = s.startInit(); err == nil {
			var part *boxinit.Plan
			if part, err = s.boxPlan(true); err == nil {
				box, err = s.startBoxPart(part)
			}
		}
		if cerr := s.awaitCgroup(); err == nil {
			err = cerr
		}
		if err == nil {
			s.boxPid, err = box.ready()
		}
		if err == nil && s.netns == nil && p.keepsNetns(spec) {
			// The box made its network namespace: the id's next boxes
			// join it (netns.go). Its PID 1 waits for a command.
			s.netns = boxNetnsOf(s.boxPid, s.init)
		}
	}
	binds := s.binds
	if err != nil {
		s.teardown() // closes them
		return nil, nil, err
	}
	s.binds = nil // the caller's: the box's teardown must not close them
	return &builtBox{s: s, box: box}, binds, nil
}

// holdTree opens the built image's tree of sl once, and checks that it is
// still the tree of sl's key.
func (p *pool) holdTree(sl *poolSlot) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sl.treeName == "" || sl.tree != nil {
		return nil
	}
	t, err := rootfs.OpenTree(sl.treeName)
	if err != nil {
		return err
	}
	if t.Dir != sl.key.imageDir {
		t.Close()
		return fmt.Errorf("image %s was rebuilt: its boxes come from the new tree", sl.treeName)
	}
	sl.tree = t
	return nil
}

// janitor tears down the ready boxes of keys nobody asked for lately and
// forgets the slots left empty.
func (p *pool) janitor() {
	defer p.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		var idle []*builtBox
		p.mu.Lock()
		now := time.Now()
		for k, sl := range p.slots {
			if now.Sub(sl.lastWant) < p.cfg.Idle {
				continue
			}
			keep := 0
			if sl.warm {
				keep = min(1, len(sl.ready))
			}
			idle = append(idle, sl.ready[keep:]...)
			p.total -= len(sl.ready) - keep
			sl.ready = sl.ready[:keep]
			if keep == 0 && sl.building == 0 && !sl.warm {
				sl.tree.Close()
				delete(p.slots, k)
			}
		}
		p.fill()
		reap := p.reapAhead(now, false)
		p.mu.Unlock()
		for _, b := range idle {
			b.s.teardown()
		}
		reap()
	}
}

// callerWait bounds how long a claimed box's end waits for its caller
// (EndAfter): the front ends close the channel within milliseconds.
const callerWait = time.Second

type endAfterKey struct{}

// EndAfter returns a context for runs whose front end closes answered once
// the caller has what it waited for (the CLI that handed its run over has
// exited, the HTTP answer is sent). A box the pool built ahead then ends
// after that, not while the caller still waits: a box's end (its init
// exiting, the kernel dropping its namespaces and mounts, the cgroup
// removed, a new box built in its place) is a few milliseconds of CPU,
// and it took the CPUs from the caller's last steps.
func EndAfter(ctx context.Context, answered <-chan struct{}) context.Context {
	return context.WithValue(ctx, endAfterKey{}, answered)
}

// endAfter is the channel EndAfter gave ctx, or nil.
func endAfter(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(endAfterKey{}).(<-chan struct{})
	return ch
}

// endInBackground runs end, the end of a claimed box, in the background,
// once after is closed (nil: at once; see EndAfter), the pool stops, or
// callerWait has passed. Nil-safe: with no pool, or a stopped one, end
// runs at once. StopPool waits for it.
func (p *pool) endInBackground(end func() error, after <-chan struct{}) {
	if p != nil {
		p.mu.Lock()
		if !p.stopped {
			p.goEnd(end, after)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	reportEnd(end())
}

// goEnd runs end in the background once after is closed (as
// endInBackground), then resumes building (p.mu held, the pool not
// stopped: StopPool waits for it).
func (p *pool) goEnd(end func() error, after <-chan struct{}) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.awaitCaller(after, nil)
		if after != nil {
			p.mu.Lock()
			p.busyAt = time.Now()
			p.mu.Unlock()
		}
		p.awaitQuiet()
		reportEnd(end())
		p.mu.Lock()
		p.fill()
		p.mu.Unlock()
	}()
}

// awaitCaller waits until after is closed (nil: not at all), the pool
// stops, callerWait has passed, or wanted (nil: never) is closed.
func (p *pool) awaitCaller(after, wanted <-chan struct{}) {
	if after == nil {
		return
	}
	wait := time.NewTimer(callerWait)
	defer wait.Stop()
	select {
	case <-after:
	case <-p.stop:
	case <-wait.C:
	case <-wanted:
	}
}

// awaitQuiet waits until no run claimed a box or had its answer for
// quietFor, maxDefer at most, or until the pool stops.
func (p *pool) awaitQuiet() {
	deadline := time.Now().Add(maxDefer)
	for {
		p.mu.Lock()
		wait := time.Until(p.busyAt.Add(quietFor))
		p.mu.Unlock()
		if left := time.Until(deadline); left < wait {
			wait = left
		}
		if wait <= 0 {
			return
		}
		select {
		case <-p.stop:
			return
		case <-time.After(wait):
		}
	}
}

func reportEnd(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "isolate: tear down a box: %v\n", err)
	}
}

func (p *pool) closeTrees() {
	for _, sl := range p.slots {
		sl.tree.Close()
	}
}

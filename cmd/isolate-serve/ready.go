package main

// Readiness that tells the truth: the service is ready only while a box
// can actually be made. A self-test (a tiny real run, through the same
// host and pool as a request's) runs at start, again after any run ends
// XX for a reason that is not its caller's, and every few seconds while
// it fails. /v1/health, `isolate-serve probe` and the queue's worker read
// its outcome.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/langs"
	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/service/server"
)

// selfTestRetry is how often a failing self-test is tried again.
const selfTestRetry = 5 * time.Second

// selfTestTimeout bounds one self-test.
const selfTestTimeout = 30 * time.Second

// readiness is the self-test's state.
type readiness struct {
	host *isolate.Host
	kick chan struct{}

	mu sync.Mutex
	// err is why the last self-test failed; nil: it passed. Before the
	// first has ended, errNotYet.
	err error
	// asked counts the requests for a self-test (Recheck, a run's XX);
	// covered is the count a finished self-test began after.
	asked, covered uint64
	tested         chan struct{} // closed when a self-test ends
}

var errNotYet = errors.New("the self-test at start has not ended yet")

func newReadiness(host *isolate.Host) *readiness {
	return &readiness{host: host, kick: make(chan struct{}, 1), err: errNotYet, tested: make(chan struct{})}
}

// test runs one self-test and records its outcome.
func (r *readiness) test(ctx context.Context) {
	r.mu.Lock()
	covering := r.asked
	r.mu.Unlock()
	err := r.selfTest(ctx)
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	if (err == nil) != (r.err == nil) || r.err == errNotYet {
		logReadiness(err)
	}
	r.err, r.covered = err, covering
	close(r.tested)
	r.tested = make(chan struct{})
	r.mu.Unlock()
}

// run self-tests until ctx ends, after the first (test, before the
// service listens): when kicked, and every selfTestRetry while failing.
func (r *readiness) run(ctx context.Context) {
	for ctx.Err() == nil {
		var retry <-chan time.Time
		if r.Err() != nil {
			retry = time.After(selfTestRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-retry:
		}
		r.test(ctx)
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "isolate serve: "+format+"\n", a...)
}

func logReadiness(err error) {
	if err != nil {
		logf("not ready: %v", err)
	} else {
		logf("ready: the self-test made a box and ran /bin/true in it")
	}
}

// selfTest makes a box and runs /bin/true in it, as a request's command
// would be run (the pool's box when one is built ahead).
func (r *readiness) selfTest(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, selfTestTimeout)
	defer cancel()
	rep, err := r.host.Run(ctx, &api.Spec{Args: []string{"/bin/true"}}, isolate.IO{})
	if err != nil {
		return fmt.Errorf("self-test: %v", err)
	}
	if rep.Status != api.StatusOK {
		return fmt.Errorf("self-test: %s %s", rep.Status, rep.Message)
	}
	return nil
}

// Err is why the service cannot make boxes now (nil: it can).
func (r *readiness) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// ask requests a self-test that begins after this call.
func (r *readiness) ask() uint64 {
	r.mu.Lock()
	r.asked++
	n := r.asked
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return n
}

// Recheck runs a self-test that begins after this call and tells its
// outcome (ctx's error when it ends first): whether the service's own
// machinery still makes boxes.
func (r *readiness) Recheck(ctx context.Context) error {
	n := r.ask()
	for {
		r.mu.Lock()
		done, err, tested := r.covered >= n, r.err, r.tested
		r.mu.Unlock()
		if done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tested:
		}
	}
}

// ranXX notes a run that ended XX: unless its own context ended it (its
// caller went, its time was up, the service is stopping), the service's
// machinery may be at fault, and a self-test tells.
func (r *readiness) ranXX(ctx context.Context, status api.Status) {
	if status == api.StatusXX && ctx.Err() == nil {
		r.ask()
	}
}

// checkedRunner is the host's runner, noting the runs that end XX.
type checkedRunner struct {
	hostRunner
	r *readiness
}

func (c checkedRunner) Run(ctx context.Context, spec *api.Spec, stdio isolate.IO) (*api.Report, error) {
	rep, err := c.hostRunner.Run(ctx, spec, stdio)
	if rep != nil {
		c.r.ranXX(ctx, rep.Status)
	}
	return rep, err
}

// checkedExec is /v1/exec's judge, noting the runs that end XX.
type checkedExec struct {
	server.Judge
	r *readiness
}

func (c checkedExec) Exec(ctx context.Context, req *server.ExecRequest, stdio isolate.IO) (*api.ExecReport, error) {
	rep, err := c.Judge.Exec(ctx, req, stdio)
	if rep != nil {
		c.r.ranXX(ctx, rep.Status)
	}
	return rep, err
}

// builtImages are the names of the built images.
func builtImages() ([]string, error) {
	ms, err := rootfs.ListImages()
	imgs := []string{}
	for _, m := range ms {
		imgs = append(imgs, m.Name)
	}
	return imgs, err
}

// images are the built images, and the languages whose image is among
// them: what this service can run.
func images() (imgs, langNames []string, err error) {
	imgs, err = builtImages()
	have := map[string]bool{}
	for _, name := range imgs {
		have[name] = true
	}
	all, lerr := langs.Load()
	langNames = []string{}
	for _, l := range all {
		if have[l.Image] {
			langNames = append(langNames, l.Name)
		}
	}
	sort.Strings(langNames)
	return imgs, langNames, errors.Join(err, lerr)
}

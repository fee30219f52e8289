package isolate_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
)

// persistentBox initialises box id under cfg (cleaned up when the test
// ends) and returns its box/ directory and a function that runs a command
// in it through h, reporting a run that is not OK (from any goroutine:
// an empty report then).
func persistentBox(t *testing.T, cfg *isolate.Config, h *isolate.Host, id int) (string, func(args ...string) *api.Report) {
	t.Helper()
	dir, err := isolate.InitBox(cfg, id, isolate.Caller(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { isolate.CleanupBox(cfg, id, false) })
	return filepath.Join(dir, "box"), func(args ...string) *api.Report {
		rep, err := h.Run(context.Background(), &api.Spec{BoxID: &id, Args: args}, isolate.IO{})
		if err != nil || rep.Status != api.StatusOK {
			t.Errorf("run of box %d: %v %+v", id, err, rep)
			return &api.Report{}
		}
		return rep
	}
}

// runUntilGo starts a run (run's) in the background that waits for the
// file go in box/, and returns once it runs; its report comes on the
// channel once the test made the file.
func runUntilGo(t *testing.T, box string, run func(args ...string) *api.Report) <-chan *api.Report {
	t.Helper()
	done := make(chan *api.Report, 1)
	go func() {
		done <- run("/bin/sh", "-c", "touch /box/started; while [ ! -e /box/go ]; do sleep 0.01; done")
	}()
	for {
		if _, err := os.Stat(filepath.Join(box, "started")); err == nil {
			return done
		}
		select {
		case rep := <-done:
			t.Fatalf("the run ended before it started: %+v", rep)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// pooledBoxRoot is a host with a box root of its own and a pool of one,
// for persistent boxes whose next boxes the pool builds ahead.
func pooledBoxRoot(t *testing.T) (*isolate.Config, *isolate.Host) {
	t.Helper()
	cfg := &isolate.Config{BoxRoot: filepath.Join(t.TempDir(), "boxes"), NumBoxes: isolate.DefaultNumBoxes}
	h, err := isolate.NewHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.StartPool(isolate.PoolConfig{Max: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.StopPool)
	return cfg, h
}

// After a run of a persistent box, the pool builds the id's next box
// ahead: the next run of the same box part claims it, and sees box/ as it
// is then, in a box nothing ran in; a run whose box part differs, or
// whose box/ was made anew, builds its own; a run of the id by another
// process (no pool: a run not handed to the service) is never kept out.
func TestPoolBuildsAheadForABoxID(t *testing.T) {
	checkNothingLeft(t)
	cfg, pooled := pooledBoxRoot(t)
	oneShot, err := isolate.NewHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const id = 731
	initBox := func() string {
		t.Helper()
		dir, err := isolate.InitBox(cfg, id, isolate.Caller(), false)
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, "box")
	}
	box := initBox()
	t.Cleanup(func() { isolate.CleanupBox(cfg, id, false) })
	run := func(h *isolate.Host, what, content, net string) *api.Report {
		t.Helper()
		if err := os.WriteFile(filepath.Join(box, "f"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		boxID := id
		rep, err := h.Run(context.Background(), &api.Spec{BoxID: &boxID, Net: net, Args: []string{"/bin/sh", "-c",
			"cat /box/f; ls /tmp; touch /tmp/used"}}, isolate.IO{})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if rep.Status != api.StatusOK || rep.Stdout != content {
			t.Fatalf("%s: %s %q, stdout %q (want %q), stderr %q", what, rep.Status, rep.Message, rep.Stdout, content, rep.Stderr)
		}
		return rep
	}
	if rep := run(pooled, "first run", "one\n", ""); claimed(rep) {
		t.Error("the first run of a box id claimed a box")
	}
	for i, content := range []string{"two\n", "three\n"} {
		if rep := run(pooled, "next run", content, ""); !claimed(rep) {
			t.Errorf("run %d after the first did not claim the box built ahead: stages %v", i+2, rep.Sandbox.Stages)
		}
	}
	if rep := run(pooled, "host network", "four\n", "host"); claimed(rep) {
		t.Error("a run with another network claimed the box built for the last one")
	}
	// Another process's run of the id is not kept out by the box built
	// ahead; the pool's next run still claims it.
	run(oneShot, "a run without the pool", "five\n", "host")
	if rep := run(pooled, "after one without the pool", "six\n", "host"); !claimed(rep) {
		t.Error("the run after one without the pool did not claim the box built ahead")
	}
	// box/ made anew: the box built ahead bound the old one.
	if err := isolate.CleanupBox(cfg, id, false); err != nil {
		t.Fatal(err)
	}
	box = initBox()
	if rep := run(pooled, "in a new box/", "seven\n", "host"); claimed(rep) {
		t.Error("a run in a box/ made anew claimed the box built for the old one")
	}
	if rep := run(pooled, "next in the new box/", "eight\n", "host"); !claimed(rep) || strings.Contains(rep.Stdout, "used") {
		t.Errorf("claimed %v, stdout %q", claimed(rep), rep.Stdout)
	}
}

// A judge cleans its box up once it has the answer of the box's last
// run: the box the pool would build ahead for the id's next run has
// nothing to be built from then, and is not built, with no error logged.
func TestPoolBuildsNothingAheadForACleanedUpBox(t *testing.T) {
	checkNothingLeft(t)
	cfg, h := pooledBoxRoot(t)
	const id = 733
	if _, err := isolate.InitBox(cfg, id, isolate.Caller(), false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { isolate.CleanupBox(cfg, id, false) })
	// What the pool logs.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	logged := make(chan string)
	go func() {
		data, _ := io.ReadAll(r)
		r.Close()
		logged <- string(data)
	}()
	defer func() {
		if os.Stderr == w {
			os.Stderr = stderr
			w.Close()
			<-logged
		}
	}()
	boxID := id
	run := func(ctx context.Context) {
		t.Helper()
		rep, err := h.Run(ctx, &api.Spec{BoxID: &boxID, Args: []string{"/bin/true"}}, isolate.IO{})
		if err != nil || rep.Status != api.StatusOK {
			t.Fatalf("run of box %d: %v %+v", id, err, rep)
		}
	}
	// The run's caller has its answer (answered closed) only once the
	// judge has cleaned the box up.
	answered := make(chan struct{})
	run(isolate.EndAfter(context.Background(), answered))
	if err := isolate.CleanupBox(cfg, id, false); err != nil {
		t.Fatal(err)
	}
	close(answered)
	// The id's next run waits for what the pool made of it.
	run(context.Background())
	h.StopPool()
	os.Stderr = stderr
	w.Close()
	if out := <-logged; strings.Contains(out, "ahead") {
		t.Errorf("the pool logged, for a box cleaned up before its next box was built:\n%s", out)
	}
}

// A run that claims the box built ahead for its box id keeps the id's
// ahead lock while it runs, for the id's next box, which takes it over:
// the lock file is not removed and made again for each run. Once the pool
// stops, the lock is gone with the last box.
func TestPoolKeepsTheAheadLockThroughAClaimedRun(t *testing.T) {
	checkNothingLeft(t)
	cfg, h := pooledBoxRoot(t)
	const id = 735
	box, run := persistentBox(t, cfg, h, id)
	aheadLock := filepath.Join(isolate.LockDir, "ahead-735")
	run("/bin/true") // the id's first run: the pool builds its next box
	// The next run claims it and, while its program runs (until the test
	// creates box/go), the ahead lock's file is there.
	done := runUntilGo(t, box, run)
	_, statErr := os.Stat(aheadLock)
	if err := os.WriteFile(filepath.Join(box, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if rep := <-done; !claimed(rep) {
		t.Fatalf("the run after the first did not claim the box built ahead: stages %v", rep.Sandbox.Stages)
	}
	if statErr != nil {
		t.Errorf("while a run of box %d that claimed its box built ahead ran: %v", id, statErr)
	}
	h.StopPool()
	if _, err := os.Stat(aheadLock); !os.IsNotExist(err) {
		t.Errorf("after the pool stopped, %s: %v (want it gone)", aheadLock, err)
	}
}

// While the run of a claimed box runs, the pool builds the id's next box;
// the pool stopped meanwhile leaves nothing of either once the run ends.
func TestPoolStopsWhileTheNextBoxWaitsForItsRun(t *testing.T) {
	checkNothingLeft(t)
	cfg, h := pooledBoxRoot(t)
	const id = 738
	box, run := persistentBox(t, cfg, h, id)
	run("/bin/true")
	done := runUntilGo(t, box, run)
	h.StopPool()
	if err := os.WriteFile(filepath.Join(box, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if rep := <-done; !claimed(rep) {
		t.Errorf("the second run did not claim the box built ahead: stages %v", rep.Sandbox.Stages)
	}
	if _, err := os.Stat(filepath.Join(isolate.LockDir, "ahead-738")); !os.IsNotExist(err) {
		t.Errorf("after the pool stopped and the run ended, the ahead lock: %v (want it gone)", err)
	}
}

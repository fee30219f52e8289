package main

// Readiness that tells the truth: a service that cannot make boxes says
// so (its health 503, its probe failing), from the start, and as soon as
// a run ends XX because its host broke; it is ready again once the host
// mends, and lists the images and languages it can run.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/internal/fdtest"
	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/service/server"
)

func (c *child) health(t *testing.T) (int, server.Health) {
	t.Helper()
	code, body := c.get("/v1/health")
	var h server.Health
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("health: %d %s", code, body)
	}
	return code, h
}

// ownCgroupRoot makes a cgroup root of the test's own (on each v1
// hierarchy, or the v2 one) and tells how to remove it again.
func ownCgroupRoot(t *testing.T) (root string, mgr *cgroup.Manager, remove func()) {
	t.Helper()
	root = fmt.Sprintf("/isolate-serve-ready-%d", os.Getpid())
	mgr, err := cgroup.NewManager(root)
	if err != nil {
		t.Fatal(err)
	}
	remove = func() {
		for _, p := range mgr.Parents() {
			os.Remove(p)
			os.Remove(filepath.Dir(p))
		}
	}
	for _, p := range mgr.Parents() {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(remove)
	return root, mgr, remove
}

func TestReadinessSelfTest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts sandboxes")
	}
	if cgroup.DetectMode() == cgroup.V2 {
		t.Skip("the test's own cgroup root on v2 needs its controllers delegated")
	}
	// A host whose cgroup root does not exist: the service starts, but
	// its self-test fails, and it says so.
	t.Setenv("ISOLATE_CGROUP_ROOT", fmt.Sprintf("/isolate-serve-no-such-root-%d", os.Getpid()))
	broken := startChild(t, t.TempDir(), "--pool", "0", "--cli-socket", "none")
	fdtest.WaitFor(t, "the broken service's self-test ends", func() bool {
		_, h := broken.health(t)
		return len(h.Reasons) > 0 && !slices.Contains(h.Reasons, errNotYet.Error())
	})
	code, h := broken.health(t)
	if code != 503 || h.Ready || !strings.Contains(strings.Join(h.Reasons, "; "), "self-test: XX create cgroup") {
		t.Errorf("a service whose cgroup root is missing: %d %+v", code, h)
	}
	if code, out := runServe(t, "probe", "--socket", broken.sock); code != 1 || !strings.Contains(out, `"ready":false`) {
		t.Errorf("probe of a broken service: exit %d, %s", code, out)
	}
	if code, out := runServe(t, "probe", "--live", "--socket", broken.sock); code != 0 {
		t.Errorf("probe --live of a broken service that answers: exit %d, %s", code, out)
	}

	// A host that works: ready, with its images and languages.
	root, _, removeRoot := ownCgroupRoot(t)
	t.Setenv("ISOLATE_CGROUP_ROOT", root)
	good := startChild(t, t.TempDir(), "--pool", "0", "--cli-socket", "none")
	fdtest.WaitFor(t, "the service is ready", func() bool {
		code, h := good.health(t)
		return code == 200 && h.Ready
	})
	_, h = good.health(t)
	ms, _ := rootfs.ListImages()
	want := []string{}
	for _, m := range ms {
		want = append(want, m.Name)
	}
	if !slices.Equal(h.Images, want) {
		t.Errorf("images %v, want %v", h.Images, want)
	}
	if slices.Contains(want, "python") != slices.Contains(h.Langs, "python") {
		t.Errorf("images %v, languages %v", h.Images, h.Langs)
	}
	if code, out := runServe(t, "probe", "--socket", good.sock); code != 0 || !strings.Contains(out, `"ready":true`) {
		t.Errorf("probe of a ready service: exit %d, %s", code, out)
	}

	// Its cgroup root goes: the next run ends XX, and the service is not
	// ready from then on, without waiting for a probe.
	removeRoot()
	if code, body := good.post("/v1/run", `{"commands":[{"args":["/bin/true"]}]}`); code != 200 || !strings.Contains(body, `"status":"XX"`) {
		t.Fatalf("a run on a host whose cgroup root went: %d %s", code, body)
	}
	fdtest.WaitFor(t, "the service is not ready after an XX", func() bool {
		code, h := good.health(t)
		return code == 503 && strings.Contains(strings.Join(h.Reasons, "; "), "self-test: XX")
	})
	// The root is back: ready again.
	ownCgroupRoot(t)
	fdtest.WaitFor(t, "the service is ready again", func() bool {
		code, _ := good.health(t)
		return code == 200
	})
}

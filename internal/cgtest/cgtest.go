// Package cgtest gives a test a cgroup root of its own (ISOLATE_CGROUP_ROOT,
// Config.CgroupRoot), so that what is in it is the test's alone: its
// parents are made, and what is left in it is removed when the test ends.
package cgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/isolate-sandbox/isolate/cgroup"
)

// Root makes the cgroup root /name-PID and returns it with its manager.
func Root(t testing.TB, name string) (string, *cgroup.Manager) {
	t.Helper()
	root := fmt.Sprintf("/%s-%d", name, os.Getpid())
	m, err := cgroup.NewManager(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Parents() {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// (What a failure left, then the root.)
		for _, b := range m.Boxes() {
			m.Remove(b)
		}
		for _, p := range m.Parents() {
			os.Remove(p)
			os.Remove(filepath.Dir(p))
		}
	})
	return root, m
}

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/internal/bench"
)

// `isolate bench --rootless` runs isolate as nobody beside bwrap and says
// how isolate enforced the limits bwrap has not. The figures are never
// judged: benchmarks are benchmarks.
func TestBenchRootless(t *testing.T) {
	needRoot(t)
	res := isolateCmd(t, "", "bench", "--rootless", "--runs", "2", "--json")
	if res.Code != 0 {
		t.Fatalf("exit %d\nstderr: %s", res.Code, res.Stderr)
	}
	var r bench.RootlessResult
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, res.Stdout)
	}
	names := map[string]bool{}
	for _, v := range r.Variants {
		names[v.Name] = true
		if v.Skipped == "" && v.WallMs.N != 2 {
			t.Errorf("%s: %d samples, want 2", v.Name, v.WallMs.N)
		}
	}
	if r.UID != nobody || !names[bench.VarBare] || !names[bench.VarCLI] || !names[bench.VarRootlessIsolate] || !names[bench.VarRootlessBwrap] {
		t.Errorf("uid %d, variants %v", r.UID, names)
	}
	for _, k := range []string{"memory", "pids", "cpu"} {
		if how := r.Limits[k]; how != "rlimit" && how != "cgroup" {
			t.Errorf("limit %s enforced by %q", k, how)
		}
	}
	text := isolateCmd(t, "", "bench", "--rootless", "--runs", "1")
	if text.Code != 0 || !strings.Contains(text.Stdout, "x bwrap") || !strings.Contains(text.Stdout, "bwrap enforces none") {
		t.Errorf("text: exit %d\n%s%s", text.Code, text.Stdout, text.Stderr)
	}
}

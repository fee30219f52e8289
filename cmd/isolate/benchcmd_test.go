package main

// Tests of `isolate bench`'s output: that it runs and says what it
// measured, in text, JSON and Markdown. The figures themselves are never
// judged here: benchmarks are benchmarks.

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/internal/bench"
)

func TestBenchPrintsMediansAndStages(t *testing.T) {
	needRoot(t)
	res := isolateCmd(t, "", "bench", "--runs", "3")
	if res.Code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{"median", "p90", "ratio to bwrap", bench.VarBare, bench.VarCLI, bench.VarIsolate, bench.VarBwrap, bench.VarUnshare,
		bench.StageCLI, "start", bench.StageSetup, bench.StageTeardown, bench.StageSetupTeardown, "1 at a time", "2 in parallel", "targets"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, res.Stdout)
		}
	}
	// Init's way in: derived for an init the supervisor spawned, timed
	// for one the command started before Go (root's in-process run).
	if !strings.Contains(res.Stdout, bench.StageInitDerived) && !strings.Contains(res.Stdout, "early-init") {
		t.Errorf("output lacks %q and early-init:\n%s", bench.StageInitDerived, res.Stdout)
	}
	if strings.Contains(res.Stdout, "precision") {
		t.Errorf("precision ran without --precision:\n%s", res.Stdout)
	}
}

func TestBenchJSON(t *testing.T) {
	needRoot(t)
	res := isolateCmd(t, "", "bench", "--runs", "3", "--json")
	if res.Code != 0 {
		t.Fatalf("exit %d\nstderr: %s", res.Code, res.Stderr)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(res.Stdout), &raw); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, res.Stdout)
	}
	for _, k := range []string{"machine", "rounds", "latency", "stages", "throughput", "targets"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	var r bench.Result
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Rounds != 3 || r.Machine.CPUs < 1 || r.Machine.Kernel == "" || r.Machine.Cgroup == "" {
		t.Errorf("rounds %d, machine %+v", r.Rounds, r.Machine)
	}
	ran := map[string]bench.VariantResult{}
	for _, v := range r.Latency {
		ran[v.Name] = v
	}
	for _, name := range []string{bench.VarBare, bench.VarCLI, bench.VarIsolate} {
		v, ok := ran[name]
		if !ok || v.WallMs.N != 3 || v.WallMs.Median <= 0 || v.WallMs.P90 < v.WallMs.Median {
			t.Errorf("%s: %+v", name, v)
		}
	}
	// The peers: without a go-judge URL skipped, saying what to give;
	// ioi/isolate measured if there is one on PATH, else skipped, saying
	// what to install.
	if gj := ran[bench.VarGoJudge]; !strings.Contains(gj.Skipped, "--go-judge URL") {
		t.Errorf("go-judge without a URL: %+v", gj)
	}
	if _, found := bench.FindIOI(); found {
		if v := ran[bench.VarIOI]; v.Skipped != "" || v.WallMs.N != 3 {
			t.Errorf("ioi/isolate on PATH: %+v", v)
		}
	} else if v := ran[bench.VarIOI]; !strings.Contains(v.Skipped, "github.com/ioi/isolate") {
		t.Errorf("ioi/isolate not on PATH: %+v", v)
	}
	if bw := ran[bench.VarBwrap]; bw.Skipped == "" && (bw.RatioToBwrap != 1 || ran[bench.VarIsolate].RatioToBwrap <= 0) {
		t.Errorf("ratios to bwrap: bwrap %v, isolate %v", bw.RatioToBwrap, ran[bench.VarIsolate].RatioToBwrap)
	}
	stages := map[string]bench.StageResult{}
	for _, s := range r.Stages {
		stages[s.Name] = s
	}
	// The runtime's own stage names change as it does; the bench's derived
	// rows and the report's totals are fixed.
	for _, name := range []string{bench.StageCLI, "before-start", "start", bench.StageSetup, bench.StageTeardown, bench.StageSetupTeardown, bench.StageOutside} {
		if s, ok := stages[name]; !ok || s.Ms.N != 3 {
			t.Errorf("stage %s: %+v", name, s)
		}
	}
	if stages[bench.StageInitDerived].Ms.N+stages["early-init"].Ms.N != 3 {
		t.Errorf("init's way in: derived %+v, early-init %+v", stages[bench.StageInitDerived], stages["early-init"])
	}
	parts := map[string]int{}
	for i, s := range r.Stages {
		parts[s.Part]++
		// init's stages are listed inside the supervisor's "start".
		if s.Part == bench.PartInit && r.Stages[i-1].Part != bench.PartInit && r.Stages[i-1].Name != "start" {
			t.Errorf("init stage %s follows %s, not start", s.Name, r.Stages[i-1].Name)
		}
	}
	if parts[bench.PartSupervisor] < 3 || parts[bench.PartInit] < 2 || parts[bench.PartCLI] != 1 || parts[bench.PartTotal] != 5 {
		t.Errorf("stages per part: %v", parts)
	}
	if tp := r.Throughput; tp == nil || tp.One <= 0 || tp.Two <= 0 || tp.Ratio <= 0 || len(tp.OneBlocks) != bench.ThroughputBlocks {
		t.Errorf("throughput: %+v", r.Throughput)
	}
	if len(r.Targets) < 2 || r.Precision != nil {
		t.Errorf("targets %+v, precision %+v", r.Targets, r.Precision)
	}
}

func TestBenchPrecisionJSON(t *testing.T) {
	needRoot(t)
	res := isolateCmd(t, "", "bench", "--runs", "1", "--json", "--precision", "--precision-runs", "1")
	if res.Code != 0 {
		t.Fatalf("exit %d\nstderr: %s", res.Code, res.Stderr)
	}
	var r bench.Result
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, res.Stdout)
	}
	p := r.Precision
	if p == nil {
		t.Fatal("no precision results")
	}
	if len(p.CPULimit) != 4 || len(p.CPUAccounting) != 2 || len(p.Memory) != 2 || len(p.WallLimit) != 3 {
		t.Fatalf("precision rows: %+v", p)
	}
	for _, row := range append(p.CPULimit, p.WallLimit...) {
		if row.Ms.N != 1 || row.Limit <= 0 {
			t.Errorf("%s: %+v", row.Label, row)
		}
	}
	for _, row := range append(p.CPUAccounting, p.Memory...) {
		if row.Pct.N != 1 || row.Target <= 0 {
			t.Errorf("%s: %+v", row.Label, row)
		}
	}
	names := map[string]bool{}
	for _, tg := range r.Targets {
		names[tg.Name] = true
	}
	for _, want := range []string{"CPU-limit overshoot, worst (ms)", "CPU accounting error, worst (%)", "memory peak error, worst (%)"} {
		if !names[want] {
			t.Errorf("targets lack %q: %+v", want, r.Targets)
		}
	}
}

func TestBenchMarkdown(t *testing.T) {
	needRoot(t)
	res := isolateCmd(t, "", "bench", "--runs", "2", "--markdown")
	if res.Code != 0 {
		t.Fatalf("exit %d\nstderr: %s", res.Code, res.Stderr)
	}
	for _, want := range []string{"| CPUs (nproc) |", "| kernel |", "| cgroup mode |", "### Latency", "| variant |",
		"### Where", "| `start` |", "**setup+teardown**", "### Throughput", "### Targets"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("markdown lacks %q:\n%s", want, res.Stdout)
		}
	}
}

func TestBenchBadInput(t *testing.T) {
	needRoot(t)
	for _, args := range [][]string{
		{"bench", "--runs", "0"},
		{"bench", "--runs", "many"},
		{"bench", "--precision-runs", "-1"},
		{"bench", "--json", "--markdown"},
		{"bench", "extra"},
		{"bench", "--seconds", "0"},
		{"bench", "--handover", "--service"},
		{"bench", "--ioi", "/bin/true"},
		{"bench", "--ioi", "/no/such/isolate"},
		{"bench", "--go-judge", "ftp://127.0.0.1:5050"},
		{"bench", "--go-judge", "127.0.0.1:5050"},
		{"bench", "--no-such-flag"},
	} {
		res := isolateCmd(t, "", args...)
		lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
		if res.Code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "isolate: ") || res.Stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line", args, res.Code, res.Stdout, res.Stderr)
		}
	}
}

// The handover bench starts a service of its own and fails unless every
// run it counts as the service's went through it (sandbox.via).
func TestBenchHandover(t *testing.T) {
	needRoot(t)
	serve, err := serveBin()
	if err != nil {
		t.Fatal(err)
	}
	res := isolateCmd(t, "", "bench", "--handover", "--runs", "2", "--serve-binary", serve)
	if res.Code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{bench.VarBare, bench.VarInProcess, bench.VarService, bench.VarBwrap, bench.VarIOIFormInProcess, bench.VarIOIFormService, bench.VarGoJudge, "throughput", "targets", "2 callers"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, res.Stdout)
		}
	}
}

// The service bench starts a service of its own and measures its API
// against the one-shot CLI; every request it counts must have answered
// 200 with status OK.
func TestBenchService(t *testing.T) {
	needRoot(t)
	serve, err := serveBin()
	if err != nil {
		t.Fatal(err)
	}
	res := isolateCmd(t, "", "bench", "--service", "--runs", "2", "--seconds", "0.2", "--json", "--serve-binary", serve)
	if res.Code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
	var got struct {
		Latency []struct {
			Name    string  `json:"name"`
			Median  float64 `json:"median_ms"`
			Skipped string  `json:"skipped"`
		} `json:"latency"`
		Runs       int `json:"api_runs"`
		Throughput []struct {
			Clients int     `json:"clients"`
			Service float64 `json:"service_runs_per_s"`
			OneShot float64 `json:"one_shot_runs_per_s"`
		} `json:"throughput"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil {
		t.Fatalf("%v: %s", err, res.Stdout)
	}
	ran := map[string]float64{}
	for _, v := range got.Latency {
		if v.Skipped == "" {
			ran[v.Name] = v.Median
		}
	}
	for _, name := range []string{bench.VarBare, bench.VarAPI, bench.VarOneShot, bench.VarAPIBackToBack, bench.VarAPISpaced} {
		if ran[name] <= 0 {
			t.Errorf("latency of %q: %v (%+v)", name, ran[name], got.Latency)
		}
	}
	if got.Runs < 2 {
		t.Errorf("the API answered %d timed requests, want 2 or more", got.Runs)
	}
	if len(got.Throughput) != 3 {
		t.Fatalf("throughput rows: %+v, want 1, 2 and 4 clients", got.Throughput)
	}
	for _, r := range got.Throughput {
		if r.Service <= 0 || r.OneShot <= 0 {
			t.Errorf("%d clients: service %v, one-shot %v runs/s", r.Clients, r.Service, r.OneShot)
		}
	}
}

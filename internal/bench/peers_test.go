package bench

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestIOIVersion(t *testing.T) {
	for out, want := range map[string]bool{
		"The process isolator 2.6\n(c) 2012--2026 Martin Mares and Bernard Blackham\n": true,
		"The process isolator 1.10.1\n": true,
		"The process isolator dev\n(isolate, compatible with ioi/isolate 2.x command lines)\n": false,
		"true (GNU coreutils) 9.1\n": false,
		"":                           false,
	} {
		if got := isIOIVersion(out); got != want {
			t.Errorf("isIOIVersion(%q) = %v, want %v", out, got, want)
		}
	}
}

func TestGoJudgeURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:5050":  "http://127.0.0.1:5050",
		"http://localhost:5050/": "http://localhost:5050",
		"http://judge.test/api/": "http://judge.test/api",
	} {
		if got, err := ParseGoJudgeURL(in); err != nil || got != want {
			t.Errorf("ParseGoJudgeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "127.0.0.1:5050", "ftp://x", "https://judge.test", "http://", "unix:///run/gj.sock", "http://a b"} {
		if _, err := ParseGoJudgeURL(in); err == nil || !strings.Contains(err.Error(), "--go-judge") {
			t.Errorf("ParseGoJudgeURL(%q): error %v, want one naming --go-judge", in, err)
		}
	}
}

func TestGoJudgeStatus(t *testing.T) {
	if err := goJudgeStatus(200, []byte(`[{"status":"Accepted","exitStatus":0,"time":1000}]`)); err != nil {
		t.Errorf("Accepted: %v", err)
	}
	for _, c := range []struct {
		code int
		body string
		want string
	}{
		{500, "internal error", "HTTP 500"},
		{200, `[{"status":"Internal Error","error":"fork/exec /bin/true: no such file"}]`, "Internal Error fork/exec"},
		{200, `[]`, "not one result"},
		{200, `{"status":"Accepted"}`, "not one result"},
	} {
		if err := goJudgeStatus(c.code, []byte(c.body)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d %s: %v, want an error with %q", c.code, c.body, err, c.want)
		}
	}
}

// Without ioi/isolate on PATH and without a go-judge URL, each peer is
// skipped with one line saying what to install or give.
func TestPeersMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	ps, err := Peers{}.peers()
	if err != nil {
		t.Fatal(err)
	}
	defer ps.close()
	if len(ps.vs) != 0 {
		t.Errorf("variants %v, want none", ps.vs)
	}
	for name, want := range map[string]string{VarIOI: "github.com/ioi/isolate", VarGoJudge: "--go-judge URL"} {
		if why := ps.skipped[name]; !strings.Contains(why, want) || strings.Contains(why, "\n") {
			t.Errorf("%s skipped: %q, want one line with %q", name, why, want)
		}
	}
	if len(ps.skipped) != 2 {
		t.Errorf("skipped %v, want ioi/isolate and go-judge only", ps.skipped)
	}
}

// The CPU of a child that still runs counts as the bench's own: a busy
// child is no other work.
func TestRunningChildIsOwnCPU(t *testing.T) {
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 3000000 ]; do i=$((i+1)); done; sleep 60")
	if err := child.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	meter := newCPUMeter(child.Process.Pid)
	// However loaded the machine, the loop gets 100 ms of CPU long before
	// this deadline; the check below holds whenever it does.
	deadline := time.Now().Add(60 * time.Second)
	for procCPU(child.Process.Pid) < 100*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	used := meter.ownCPU() - meter.ours
	if used < 50*time.Millisecond {
		t.Errorf("a running child's CPU not counted: %v", used)
	}
}

// TestJudgesPathTargets: with ioi/isolate in the rounds, the handover
// bench states the judges' path against it: in-process at most 1.25
// times, handed over at most once its median with a p90 at most 1.5
// times that median; one box per caller at least its runs per second,
// at most 0.2 ms more CPU per run.
func TestJudgesPathTargets(t *testing.T) {
	row := func(name string, ms float64) VariantResult {
		return VariantResult{Name: name, WallMs: dist{N: 1, Median: ms}}
	}
	res := &HandoverResult{Latency: []VariantResult{row(VarIOI, 4), row(VarIOIFormInProcess, 4.8), row(VarIOIFormService, 3)},
		Judges: []judgesThrough{{Callers: 1, Ratio: 1.1, ServiceCPU: 3.1, IOICPU: 3.0}, {Callers: 2, Ratio: 0.9, ServiceCPU: 3.5, IOICPU: 3.0}}}
	res.Latency[2].WallMs.P90 = 6
	got := map[string]targetResult{}
	for _, tr := range handoverTargets(res) {
		got[tr.Name] = tr
	}
	for name, want := range map[string]targetResult{
		"ioi form in-process: median / ioi/isolate":                  {Value: 1.2, Met: true},
		"ioi form via service: median / ioi/isolate":                 {Value: 0.75, Met: true},
		"ioi form via service: back-to-back p90 / median":            {Value: 2, Met: false},
		"1 caller(s), a box each: --run/s via service / ioi/isolate": {Value: 1.1, Met: true},
		"2 caller(s), a box each: --run/s via service / ioi/isolate": {Value: 0.9, Met: false},
		"1 caller(s): CPU ms per run, via service - ioi/isolate":     {Value: 0.1, Met: true},
		"2 caller(s): CPU ms per run, via service - ioi/isolate":     {Value: 0.5, Met: false},
	} {
		tr, ok := got[name]
		if !ok || tr.Met != want.Met || tr.Value < want.Value-1e-9 || tr.Value > want.Value+1e-9 {
			t.Errorf("%s: %+v (present %v), want value %v met %v", name, tr, ok, want.Value, want.Met)
		}
	}
	res.Latency[0].Skipped = "not installed"
	res.Judges = nil
	for _, tr := range handoverTargets(res) {
		if strings.Contains(tr.Name, "ioi/isolate") {
			t.Errorf("ioi/isolate skipped, yet target %q", tr.Name)
		}
	}
}

package judge

import (
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/langs"
)

func TestCompileVerdict(t *testing.T) {
	for _, c := range []struct {
		status api.Status
		want   api.Status
	}{
		{api.StatusOK, api.StatusOK}, {api.StatusXX, api.StatusXX}, {api.StatusRE, api.StatusCE},
		{api.StatusTO, api.StatusCE}, {api.StatusML, api.StatusCE}, {api.StatusSG, api.StatusCE},
	} {
		if got := compileVerdict(&api.Report{Status: c.status}); got != c.want {
			t.Errorf("compiler %s: %s, want %s", c.status, got, c.want)
		}
	}
}

func TestSyntaxError(t *testing.T) {
	py := &langs.Lang{Run: []string{"python3", "main.py"}, SyntaxErrorExit: 3}
	c := &langs.Lang{Compile: []string{"cc"}, Run: []string{"./main"}, SyntaxErrorExit: 3}
	plain := &langs.Lang{Run: []string{"sh", "main.sh"}}
	for _, tc := range []struct {
		lang *langs.Lang
		rep  api.Report
		want bool
	}{
		{py, api.Report{Status: api.StatusRE, ExitCode: 3}, true},
		{py, api.Report{Status: api.StatusRE, ExitCode: 1}, false},
		{py, api.Report{Status: api.StatusTO, ExitCode: 3}, false},
		{c, api.Report{Status: api.StatusRE, ExitCode: 3}, false},
		{plain, api.Report{Status: api.StatusRE, ExitCode: 0}, false},
	} {
		if got := syntaxError(tc.lang, &tc.rep); got != tc.want {
			t.Errorf("%v, %s exit %d: %v, want %v", tc.lang.Run, tc.rep.Status, tc.rep.ExitCode, got, tc.want)
		}
	}
}

func TestCompileMessage(t *testing.T) {
	for _, c := range []struct {
		rep  api.Report
		want string
	}{
		{api.Report{Status: api.StatusRE, Stderr: "main.c:1: error\n", Message: "exited with status 1"}, "main.c:1: error"},
		{api.Report{Status: api.StatusRE, Stdout: "out\n", Stderr: "err\n"}, "err\nout"},
		{api.Report{Status: api.StatusRE, Message: "exited with status 1"}, "compilation failed: exited with status 1"},
		{api.Report{Status: api.StatusTO, Message: "CPU time limit exceeded", Stderr: "x"}, "compilation: CPU time limit exceeded\nx"},
		{api.Report{Status: api.StatusML}, "compilation: memory limit exceeded"},
	} {
		if got := compileMessage(&c.rep); got != c.want {
			t.Errorf("%+v: %q, want %q", c.rep, got, c.want)
		}
	}
}

// A language's limits apply where the request leaves the default.
func TestApplyLimits(t *testing.T) {
	l := langs.Limits{Time: "2", Wall: "5s", Memory: "256M", TmpSize: "128M", FSize: "0", Pids: 32}
	s := isolate.Defaults()
	if err := applyLimits(&s, l, &api.Spec{}); err != nil {
		t.Fatal(err)
	}
	if s.CPUTime != 2*time.Second || s.WallTime != 5*time.Second || s.Memory != 256<<20 || s.TmpSize != 128<<20 || s.FileSize != 0 || s.Pids != 32 {
		t.Errorf("language limits: %+v", s)
	}
	s = isolate.Defaults()
	s.Memory = 100 << 20
	if err := applyLimits(&s, l, &api.Spec{MemoryBytes: 100 << 20, Pids: 8, CPUTimeMs: 1000}); err != nil {
		t.Fatal(err)
	}
	if s.Memory != 100<<20 || s.Pids != 64 || s.CPUTime != 0 || s.WallTime != 5*time.Second {
		t.Errorf("request's own limits overridden: %+v", s)
	}
	if err := applyLimits(&s, langs.Limits{Memory: "NaN"}, &api.Spec{}); err == nil {
		t.Error("a malformed language limit was accepted")
	}
}

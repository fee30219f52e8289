package api

import (
	"encoding/json"
	"errors"
	"math"
	"os/exec"
	"strings"
	"testing"
)

func intp(i int) *int { return &i }

func TestValidate(t *testing.T) {
	ok := Spec{Args: []string{"/bin/true"}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal spec: %v", err)
	}
	bad := []struct {
		field string
		edit  func(*Spec)
	}{
		{"args", func(s *Spec) { s.Args = nil }},
		{"args", func(s *Spec) { s.Args = []string{""} }},
		{"env[1]", func(s *Spec) { s.Env = []string{"A=1", "B"} }},
		{"env[0]", func(s *Spec) { s.Env = []string{"=x"} }},
		{"cwd", func(s *Spec) { s.Cwd = "box" }},
		{"net", func(s *Spec) { s.Net = "bridge" }},
		{"box_id", func(s *Spec) { s.BoxID = intp(-1) }},
		{"cpu_time_ms", func(s *Spec) { s.CPUTimeMs = -2 }},
		{"wall_time_ms", func(s *Spec) { s.WallTimeMs = 1e12 }},
		{"memory_bytes", func(s *Spec) { s.MemoryBytes = -5 }},
		{"output_limit_bytes", func(s *Spec) { s.OutputLimitBytes = math.MaxInt64 }},
		{"cpus", func(s *Spec) { s.CPUs = math.NaN() }},
		{"cpus", func(s *Spec) { s.CPUs = math.Inf(1) }},
		{"cpus", func(s *Spec) { s.CPUs = -0.5 }},
		{"binds[0].box", func(s *Spec) { s.Binds = []Bind{{Host: "/tmp", Box: "/"}} }},
		{"binds[0].box", func(s *Spec) { s.Binds = []Bind{{Host: "/tmp", Box: "rel"}} }},
		{"binds[0].host", func(s *Spec) { s.Binds = []Bind{{Box: "/x"}} }},
		{"copy_out[0].to", func(s *Spec) { s.CopyOut = []Copy{{From: "a"}} }},
	}
	for _, c := range bad {
		s := ok
		c.edit(&s)
		err := s.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: Validate() = %v, want a FieldError on %s", c.field, err, c.field)
		}
	}
	for _, s := range []Spec{
		{Args: []string{"x"}, MemoryBytes: Unlimited, CPUs: Unlimited, WallTimeMs: Unlimited, BoxID: intp(3), Net: "host"},
	} {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	if got := (&FieldError{Field: "pids", Msg: "m"}).In("commands[0]").Error(); got != "commands[0].pids: m" {
		t.Errorf("In: %q", got)
	}
}

func TestWithDefaults(t *testing.T) {
	d := Spec{Args: []string{"x"}}.WithDefaults()
	if d.MemoryBytes != 512<<20 || d.Pids != 64 || d.WallTimeMs != 60000 || d.Cwd != "/box" || d.Image != "host" || d.Net != "none" || d.Seccomp != "default" {
		t.Errorf("defaults: %+v", d)
	}
	d = Spec{CPUTimeMs: 1000, ExtraTimeMs: 500, MemoryBytes: Unlimited, Lang: "c"}.WithDefaults()
	if d.WallTimeMs != 4000 || d.MemoryBytes != Unlimited || d.Image != "" {
		t.Errorf("with a CPU limit: %+v", d)
	}
}

// The request's JSON names are the contract's; an absent field is zero.
func TestSpecJSON(t *testing.T) {
	var s Spec
	in := `{"args":["/bin/echo","hi"],"env":["A=1"],"cwd":"/tmp","box_id":0,"cpu_time_ms":1500,"memory_bytes":-1,"cpus":0.5,"binds":[{"host":"/h","box":"/b","rw":true}],"copy_in":[{"from":"f","to":"t"}],"stderr_to_stdout":true}`
	dec := json.NewDecoder(strings.NewReader(in))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatal(err)
	}
	if s.BoxID == nil || *s.BoxID != 0 || s.CPUTimeMs != 1500 || s.MemoryBytes != Unlimited || s.CPUs != 0.5 || !s.Binds[0].Writable || !s.StderrToStdout || s.CopyIn[0].To != "t" {
		t.Errorf("decoded %+v", s)
	}
}

func TestStepError(t *testing.T) {
	e := &StepError{Step: "mount /proc", Errno: 1, Msg: "Operation not permitted"}
	if e.Error() != "mount /proc: Operation not permitted (errno 1)" {
		t.Errorf("Error() = %q", e.Error())
	}
	if (&StepError{Step: "s", Msg: "m"}).Error() != "s: m" {
		t.Errorf("without errno: %q", (&StepError{Step: "s", Msg: "m"}).Error())
	}
}

// Package api is what clients link: it must build without cgo and pull
// in no package that uses it.
func TestNoCgo(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command: ", err)
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if .CgoFiles}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("package api depends on cgo packages:\n%s", s)
	}
	cmd := exec.Command("go", "build", "-o", "/dev/null", ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("CGO_ENABLED=0 go build: %v: %s", err, out)
	}
}

// Limits names what a spec sets, by the request's JSON names.
func TestLimits(t *testing.T) {
	s := Spec{CPUTimeMs: 1000, MemoryBytes: 1 << 20, CPUs: 0.5, Pids: Unlimited}
	got := Limits(&s)
	want := map[string]any{"cpu_time_ms": int64(1000), "memory_bytes": int64(1 << 20), "cpus": 0.5, "pids": int64(Unlimited)}
	if len(got) != len(want) {
		t.Fatalf("Limits = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Limits[%s] = %v, want %v", k, got[k], v)
		}
	}
}

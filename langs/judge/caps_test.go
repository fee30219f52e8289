package judge

import (
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/langs"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// The compile phase takes the language's limits, within the service's
// caps when the caller is capped: a member under --max-mem 64M compiles
// in 64 MiB, not the language's 512.
func TestCompileWithinCaps(t *testing.T) {
	lang := &langs.Lang{Name: "c", Compile: []string{"cc", "main.c"},
		CompileLimits: langs.Limits{Time: "10s", Wall: "20s", Memory: "512M", Pids: 128, TmpSize: "256M", FSize: "128M"}}
	j := &Job{lang: lang, spec: &isolate.Spec{}}
	s, err := j.compileSpec()
	if err != nil {
		t.Fatal(err)
	}
	if s.Memory != 512<<20 || s.CPUTime != 10*time.Second || s.Pids != 128 {
		t.Fatalf("uncapped: memory %d, time %v, pids %d: want the language's", s.Memory, s.CPUTime, s.Pids)
	}
	j.CapCompile(caller.Caps{CPUTimeMs: 1000, WallTimeMs: 5000, MemoryBytes: 64 << 20, Pids: 32, TmpSizeBytes: 16 << 20, FileSizeBytes: 8 << 20, CPUs: 1})
	if s, err = j.compileSpec(); err != nil {
		t.Fatal(err)
	}
	if s.Memory != 64<<20 || s.CPUTime != time.Second || s.WallTime != 5*time.Second || s.Pids != 32 ||
		s.TmpSize != 16<<20 || s.FileSize != 8<<20 || s.CPUs != 1 || s.ExtraTime != 0 {
		t.Errorf("capped: %+v", s)
	}
}

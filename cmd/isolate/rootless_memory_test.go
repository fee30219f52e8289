package main

// With rlimits alone (a user who is not root, no delegated cgroup), each
// language's memory rule: every built language runs at its documented
// defaults, the report says how memory was bounded, and the rule still
// bounds it.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
)

// rlimitRules are the built-in languages' rlimit_memory rules: the
// runtimes that reserve far more address space than they touch are
// bounded by RLIMIT_DATA.
var rlimitRules = map[string]string{
	"c": "address-space", "cpp": "address-space", "python": "address-space", "python-data": "address-space", "rust": "address-space",
	"go": "data", "javascript": "data", "java": "data",
}

func TestRootlessExecEveryLanguageDefaultMemory(t *testing.T) {
	needRoot(t)
	env, tmp := rootlessEnv(t)
	dir := filepath.Join(tmp, "src")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte("20 22\n"), 0o644)
	for _, c := range langCases {
		t.Run(c.lang, func(t *testing.T) {
			needImage(t, c.lang)
			src := filepath.Join(dir, c.file)
			if err := os.WriteFile(src, []byte(c.sum), 0o644); err != nil {
				t.Fatal(err)
			}
			// No --mem: the language's and the run's defaults.
			res := asNobody(t, env, "exec", "--allow-rlimit-only", "--json", "--stdin", in, "--lang", c.lang, src)
			var rep api.ExecReport
			if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
				t.Fatalf("exit %d, no report: %s", res.Code, res.Stderr)
			}
			if rep.Status != api.StatusOK || rep.Run == nil || rep.Run.Stdout != "42\n" {
				t.Fatalf("exec --lang %s at the default memory, rlimits alone: exit %d\n%s\n%s", c.lang, res.Code, res.Stdout, res.Stderr)
			}
			phases := []*api.Report{rep.Run}
			if rep.Compile != nil {
				phases = append(phases, rep.Compile)
			}
			for _, p := range phases {
				if l := p.Sandbox.Limits; l["memory"] != "rlimit" || l["memory_rlimit"] != rlimitRules[c.lang] {
					t.Errorf("sandbox.limits %v: want memory rlimit, memory_rlimit %s", l, rlimitRules[c.lang])
				}
			}
		})
	}
	// RLIMIT_DATA bounds what a program touches: a Go program that fills
	// 1 GiB fails at the default 512 MB.
	t.Run("go over the limit", func(t *testing.T) {
		needImage(t, "go")
		src := filepath.Join(dir, "big.go")
		os.WriteFile(src, []byte("package main\nimport \"fmt\"\nfunc main(){b:=make([]byte,1<<30);for i:=range b{b[i]=1};fmt.Println(len(b))}\n"), 0o644)
		res := asNobody(t, env, "exec", "--allow-rlimit-only", "--json", "--lang", "go", src)
		var rep api.ExecReport
		if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
			t.Fatalf("exit %d, no report: %s", res.Code, res.Stderr)
		}
		if rep.Status == api.StatusOK || rep.Run == nil || rep.Run.Stdout != "" || rep.Run.Sandbox.Limits["memory_rlimit"] != "data" {
			t.Errorf("1 GiB under a 512 MB RLIMIT_DATA: %s\n%s", res.Stdout, res.Stderr)
		}
	})
	if leaks := rootlessLeaks(tmp, ""); len(leaks) > 0 {
		t.Errorf("exec left %v", leaks)
	}
}

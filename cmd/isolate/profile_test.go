package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
)

// An OCI profile using every comparison operator and action compiles and
// runs; a profile that would refuse what the box's own start needs is
// refused before anything starts, naming the entry and the action.
func TestProfileOperatorsAndActions(t *testing.T) {
	needRoot(t)
	dir := shareDir(t)
	profile := filepath.Join(dir, "p.json")
	os.WriteFile(profile, []byte(`{
  "defaultAction": "SCMP_ACT_ALLOW",
  "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
  "syscalls": [
    {"names": ["acct"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_NE"}]},
    {"names": ["swapon"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 1, "value": 2, "op": "SCMP_CMP_GT"}]},
    {"names": ["swapoff"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 3, "op": "SCMP_CMP_GE"}]},
    {"names": ["syslog"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 4, "op": "SCMP_CMP_LT"}]},
    {"names": ["quotactl"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 5, "op": "SCMP_CMP_LE"}]},
    {"names": ["reboot"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 255, "valueTwo": 7, "op": "SCMP_CMP_MASKED_EQ"}]},
    {"names": ["vhangup"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]},
    {"names": ["kexec_load"], "action": "SCMP_ACT_TRAP"},
    {"names": ["lookup_dcookie"], "action": "SCMP_ACT_LOG"},
    {"names": ["init_module"], "action": "SCMP_ACT_KILL_THREAD"},
    {"names": ["delete_module"], "action": "SCMP_ACT_KILL_PROCESS"},
    {"names": ["uselib"], "action": "SCMP_ACT_TRACE"}
  ]
}`), 0o644)
	rep, code := runBox(t, "--seccomp", profile, "--", "/bin/true")
	if rep.Status != isolate.StatusOK || code != 0 || rep.Sandbox.Seccomp != profile {
		t.Errorf("profile with every operator: %s %q exit %d seccomp %q", rep.Status, rep.Message, code, rep.Sandbox.Seccomp)
	}
	for _, action := range []string{"SCMP_ACT_TRAP", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_TRACE"} {
		os.WriteFile(profile, []byte(`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["execve"], "action": "`+action+`"}]}`), 0o644)
		res := isolateCmd(t, "", "run", "--seccomp", profile, "--", "/bin/true")
		if lines := strings.Split(strings.TrimSpace(res.Stderr), "\n"); res.Code != 2 || len(lines) != 1 || !strings.Contains(res.Stderr, "execve") {
			t.Errorf("profile refusing execve with %s: exit %d stderr %q, want one line naming execve", action, res.Code, res.Stderr)
		}
	}
}

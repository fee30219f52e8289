package seccomp

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func writeProfile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// allowAllBut is a profile in the deny-list style: everything allowed
// except the named syscalls, refused with action.
func allowAllBut(action string, names ...string) string {
	b, _ := json.Marshal(map[string]any{
		"defaultAction": "SCMP_ACT_ALLOW",
		"syscalls":      []map[string]any{{"names": names, "action": action}},
	})
	return string(b)
}

func TestProfileDenyingUname(t *testing.T) {
	p, err := Compile(writeProfile(t, allowAllBut("SCMP_ACT_ERRNO", "uname")))
	if err != nil {
		t.Fatal(err)
	}
	if p.Notify || !strings.HasSuffix(p.Name, "profile.json") {
		t.Fatalf("program %+v", p)
	}
	res := runChild(t, p, []probe{{"uname", [6]uint64{}}, {"getpid", [6]uint64{}}})
	if len(res.errnos) != 2 || res.errnos[0] != unix.EPERM || res.errnos[1] != 0 {
		t.Fatalf("errnos %v, want [EPERM 0]; output:\n%s", res.errnos, res.output)
	}
	res = runChild(t, p, nil, "/bin/uname")
	if res.status.ExitStatus() == 0 {
		t.Fatalf("/bin/uname succeeded under a profile refusing uname:\n%s", res.output)
	}
}

func TestProfileNotifyRecords(t *testing.T) {
	p, err := Compile(writeProfile(t, allowAllBut("SCMP_ACT_NOTIFY", "uname", "getppid")))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Notify {
		t.Fatal("a profile with SCMP_ACT_NOTIFY must need a listener")
	}
	res := runChild(t, p, []probe{{"uname", [6]uint64{}}, {"uname", [6]uint64{}}, {"getppid", [6]uint64{}}, {"getpid", [6]uint64{}}})
	if len(res.errnos) != 4 || res.errnos[0] != unix.EPERM || res.errnos[3] != 0 {
		t.Fatalf("errnos %v; output:\n%s", res.errnos, res.output)
	}
	if count(res.blocked, "uname") != 2 || count(res.blocked, "getppid") != 1 || len(res.blocked) != 2 {
		t.Fatalf("blocked %v", res.blocked)
	}
}

// A Docker-format allow-list profile: archMap, entries for capabilities
// the box never has, kernel-version conditions, argument conditions, and
// the ENOSYS answer to syscalls newer than the profile.
func TestDockerFormatProfile(t *testing.T) {
	names := append([]string{}, allowed...)
	profile := map[string]any{
		"defaultAction":   "SCMP_ACT_ERRNO",
		"defaultErrnoRet": 1,
		"archMap": []map[string]any{
			{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": []string{"SCMP_ARCH_X86", "SCMP_ARCH_X32"}},
			{"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": []string{"SCMP_ARCH_ARM"}},
		},
		"syscalls": []map[string]any{
			{"names": names, "action": "SCMP_ACT_ALLOW", "comment": "the default policy's list"},
			{"names": []string{"mount", "umount2"}, "action": "SCMP_ACT_ALLOW", "includes": map[string]any{"caps": []string{"CAP_SYS_ADMIN"}}},
			{"names": []string{"acct"}, "action": "SCMP_ACT_ALLOW", "includes": map[string]any{"minKernel": "99.0"}},
			{"names": []string{"syslog"}, "action": "SCMP_ACT_ALLOW", "includes": map[string]any{"minKernel": "4.8"}},
			{"names": []string{"vhangup"}, "action": "SCMP_ACT_ALLOW", "excludes": map[string]any{"arches": []string{"amd64"}}},
			{"names": []string{"personality"}, "action": "SCMP_ACT_ALLOW", "args": []map[string]any{{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}}},
			{"name": "ustat", "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
		},
	}
	b, _ := json.Marshal(profile)
	p, err := Compile(writeProfile(t, string(b)))
	if err != nil {
		t.Fatal(err)
	}
	prog := mustDecode(t, p.Filter)
	x86 := uint32(unix.AUDIT_ARCH_X86_64)
	eperm, enosys := retErrno|uint32(unix.EPERM), retErrno|uint32(unix.ENOSYS)
	for _, c := range []struct {
		name string
		args []uint64
		want uint32
	}{
		{"read", nil, retAllow},
		{"mount", nil, eperm},     // for CAP_SYS_ADMIN holders only
		{"acct", nil, eperm},      // for kernels >= 99.0
		{"syslog", nil, retAllow}, // this kernel is >= 4.8
		{"vhangup", nil, eperm},   // excluded on amd64
		{"personality", []uint64{0}, retAllow},
		{"personality", []uint64{8}, eperm},
		{"ustat", nil, enosys},
		{"ptrace", nil, eperm},
	} {
		if r := verdict(t, prog, x86, c.name, c.args...); r != c.want {
			t.Errorf("%s%v: %s, want %s", c.name, c.args, describeRet(r), describeRet(c.want))
		}
	}
	// Newer than anything the profile names: ENOSYS, so runtimes fall back.
	for _, nr := range []uint32{horizon + 1, 500, 1000} {
		c := call{Nr: nr, Arch: x86}
		if r, _ := eval(prog, &c); r != enosys {
			t.Errorf("syscall %d: %s, want ENOSYS", nr, describeRet(r))
		}
	}
	// The profile adds the i386 ABI: its calls are filtered, not killed.
	c := call{Nr: 20 /* i386 getpid */, Arch: unix.AUDIT_ARCH_I386}
	if r, _ := eval(prog, &c); r != retAllow {
		t.Errorf("i386 getpid: %s, want allow (the profile lists SCMP_ARCH_X86)", describeRet(r))
	}
	res := runChild(t, p, nil, "/bin/true")
	if res.status.ExitStatus() != 0 {
		t.Fatalf("/bin/true under the Docker-format profile: %v\n%s", res.status, res.output)
	}
}

func TestOCIConfigAndENOSYSDefault(t *testing.T) {
	// A whole config.json, and a profile whose default already says ENOSYS.
	cfg := `{"ociVersion": "1.0.2", "linux": {"seccomp": {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38,
		"syscalls": [{"names": ["read", "write", "close", "sendmsg", "execve", "exit_group", "brk", "mmap"], "action": "SCMP_ACT_ALLOW"}]}}}`
	p, err := Compile(writeProfile(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	prog := mustDecode(t, p.Filter)
	if r := verdict(t, prog, unix.AUDIT_ARCH_X86_64, "getpid"); r != retErrno|uint32(unix.ENOSYS) {
		t.Fatalf("getpid: %s", describeRet(r))
	}
}

func TestBrokenProfilesNameTheEntry(t *testing.T) {
	cases := []struct {
		body string
		want []string // in the message
	}{
		{`{"defaultAction": "SCMP_ACT_ALLOW",`, []string{"unexpected end of file"}},
		{"{\n  \"defaultAction\": \"SCMP_ACT_ALLOW\"\n  \"syscalls\": []\n}", []string{"line 3"}},
		{`{"defaultAcion": "SCMP_ACT_ALLOW"}`, []string{`unknown field "defaultAcion"`}},
		{`{"syscalls": [{"names": ["uname"], "action": "SCMP_ACT_ERRNO"}]}`, []string{"defaultAction", "missing"}},
		{`{"defaultAction": "SCMP_ACT_ALOW"}`, []string{"defaultAction", `"SCMP_ACT_ALOW"`, "SCMP_ACT_ALLOW"}},
		{`{"defaultAction": "SCMP_ACT_NOTIFY"}`, []string{"defaultAction", "SCMP_ACT_NOTIFY"}},
		{`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["getpid"], "action": "SCMP_ACT_ERRNO"}, {"names": ["uname"], "action": "SCMP_ACT_EPERM"}]}`,
			[]string{"syscalls[1] (uname)", `"SCMP_ACT_EPERM"`}},
		{`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": [], "action": "SCMP_ACT_ERRNO"}]}`, []string{"syscalls[0]", "no syscall names"}},
		{`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["uname"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 7, "value": 1, "op": "SCMP_CMP_EQ"}]}]}`,
			[]string{"syscalls[0] (uname)", "args[0]", "index 7"}},
		{`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["uname"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQUAL"}]}]}`,
			[]string{"syscalls[0] (uname)", `"SCMP_CMP_EQUAL"`}},
		{`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["uname"], "action": "SCMP_ACT_ERRNO", "argz": []}]}`,
			[]string{"syscalls[0]", `unknown field "argz"`}},
		{`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["uname"], "action": "SCMP_ACT_ERRNO", "errnoRet": 70000}]}`,
			[]string{"syscalls[0] (uname)", "errnoRet 70000"}},
		{`{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_Z80"]}`, []string{"architectures[1]", `"SCMP_ARCH_Z80"`}},
		{`{"defaultAction": "SCMP_ACT_ALLOW", "flags": ["SECCOMP_FILTER_FLAG_FAST"]}`, []string{"flags[0]"}},
		{`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["uname"], "action": "SCMP_ACT_ERRNO", "includes": {"minKernel": "five"}}]}`,
			[]string{"syscalls[0] (uname)", "minKernel"}},
		// Refusing what the sandbox itself needs after loading the filter.
		{allowAllBut("SCMP_ACT_ERRNO", "uname", "execve"), []string{"syscalls[0] (uname,execve)", "refuses execve"}},
		{allowAllBut("SCMP_ACT_NOTIFY", "sendmsg"), []string{"syscalls[0] (sendmsg)", "refuses sendmsg (notify)"}},
		{`{"defaultAction": "SCMP_ACT_KILL", "syscalls": [{"names": ["execve", "write"], "action": "SCMP_ACT_ALLOW"}]}`,
			[]string{"defaultAction", "refuses exit_group (errno ENOSYS)"}},
		{`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["execve", "write", "exit_group"], "action": "SCMP_ACT_ALLOW"}, {"names": ["uname"], "action": "SCMP_ACT_NOTIFY"}]}`,
			[]string{"defaultAction", "refuses sendmsg (errno EPERM)"}},
	}
	for i, c := range cases {
		path := writeProfile(t, c.body)
		_, err := Compile(path)
		var pe *ProfileError
		if !errors.As(err, &pe) {
			t.Errorf("case %d: error %v (%T), want a *ProfileError", i, err, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, path) {
			t.Errorf("case %d: %q does not name the profile", i, msg)
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("case %d: %q does not say %q", i, msg, w)
			}
		}
	}
	_, err := Compile(filepath.Join(t.TempDir(), "missing.json"))
	var pe *ProfileError
	if !errors.As(err, &pe) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing profile: %v", err)
	}
}

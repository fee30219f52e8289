package main

// The plain users the rootless tests run as: nobody (uid = gid, no
// subordinate ids on a fresh host) and a user made as `useradd` makes
// them, whose primary group is not its uid and who has subordinate ids.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/isolate-sandbox/isolate/api"
)

// plainUser is a user who is not root.
type plainUser struct {
	name     string
	uid, gid int
	// subordinate: the user has subordinate ids (and the host uidmap's
	// tools), so its box user is one of them (sandbox.user).
	subordinate bool
}

// nobodyUser is nobody, 65534:65534.
var nobodyUser = plainUser{name: "nobody", uid: nobody, gid: nobody}

func (u plainUser) cred() *syscall.Credential {
	return &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid)}
}

// boxUser is the report's sandbox.user of u's runs.
func (u plainUser) boxUser() string {
	if u.subordinate {
		return "subordinate"
	}
	return "caller"
}

// The user splitUser makes: uid 23001, primary group 23500 of its own.
const (
	splitName      = "isolate-split"
	splitGroup     = "isolate-split-g"
	splitUID       = 23001
	splitGID       = 23500
	splitSubMarker = splitName + ":"
)

// splitUser creates a real user whose primary gid (23500) is not its uid
// (23001), with useradd as a host's administrator would (Debian's
// useradd also gives it a subordinate range), and removes it, its group
// and its ranges when the test ends. A user or group of that name left by
// a test that was killed is removed first; another account holding
// either number fails the test.
func splitUser(t *testing.T) plainUser {
	t.Helper()
	for _, tool := range []string{"useradd", "userdel", "groupadd", "groupdel"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (Debian's passwd package)", tool)
		}
	}
	run := func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	remove := func() {
		if _, err := lookupName("/etc/passwd", splitName); err == nil {
			exec.Command("userdel", splitName).Run()
		}
		if _, err := lookupName("/etc/group", splitGroup); err == nil {
			exec.Command("groupdel", splitGroup).Run()
		}
	}
	remove()
	if name, err := lookupID("/etc/passwd", splitUID); err == nil {
		t.Fatalf("uid %d is %s's: the test's user needs it", splitUID, name)
	}
	if name, err := lookupID("/etc/group", splitGID); err == nil {
		t.Fatalf("gid %d is %s's: the test's user needs it", splitGID, name)
	}
	run("groupadd", "-g", strconv.Itoa(splitGID), splitGroup)
	t.Cleanup(func() {
		remove()
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			data, _ := os.ReadFile(f)
			if strings.Contains(string(data), "\n"+splitSubMarker) || strings.HasPrefix(string(data), splitSubMarker) {
				t.Errorf("userdel left %s's range in %s", splitName, f)
			}
		}
	})
	run("useradd", "-u", strconv.Itoa(splitUID), "-g", splitGroup, "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", splitName)
	u := plainUser{name: splitName, uid: splitUID, gid: splitGID}
	sub, _ := os.ReadFile("/etc/subuid")
	_, errU := exec.LookPath("newuidmap")
	_, errG := exec.LookPath("newgidmap")
	u.subordinate = strings.Contains("\n"+string(sub), "\n"+splitSubMarker) && errU == nil && errG == nil
	return u
}

// lookupName is the id of name in an /etc/passwd-like file.
func lookupName(file, name string) (int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Split(line, ":"); len(f) > 2 && f[0] == name {
			return strconv.Atoi(f[2])
		}
	}
	return 0, os.ErrNotExist
}

// lookupID is the name of id in an /etc/passwd-like file.
func lookupID(file string, id int) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Split(line, ":"); len(f) > 2 && f[2] == strconv.Itoa(id) {
			return f[0], nil
		}
	}
	return "", os.ErrNotExist
}

// exec runs in every built language's image for a user whose gid is not
// its uid: the source copied into /box is the user's, with the user's
// group (exec once failed in every language here: "chown main.py:
// operation not permitted"). Without a delegated cgroup the memory limit
// is RLIMIT_AS, which runtimes that reserve address space up front (Go,
// V8) need large; Java's compile phase keeps its language's own 1G, too
// small for the JVM's reservations, so Java cannot run on rlimits alone.
func TestRootlessExecEveryLanguageUIDNotGID(t *testing.T) {
	needRoot(t)
	u := splitUser(t)
	env, tmp := rootlessEnvOf(t, u)
	dir := filepath.Join(tmp, "src")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range langCases {
		t.Run(c.lang, func(t *testing.T) {
			needImage(t, c.lang)
			src := filepath.Join(dir, c.file)
			if err := os.WriteFile(src, []byte(c.sum), 0o644); err != nil {
				t.Fatal(err)
			}
			in := filepath.Join(dir, "in.txt")
			os.WriteFile(in, []byte("20 22\n"), 0o644)
			res := asUser(t, u, env, "exec", "--allow-rlimit-only", "--json", "--mem", "16G", "--stdin", in, "--lang", c.lang, src)
			var rep api.ExecReport
			if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
				t.Fatalf("exit %d, no report: %s", res.Code, res.Stderr)
			}
			if rep.Status != api.StatusOK || rep.Run == nil || rep.Run.Stdout != "42\n" || rep.Run.Sandbox.User != u.boxUser() {
				t.Errorf("exec --lang %s as uid %d gid %d: exit %d %s %s", c.lang, u.uid, u.gid, res.Code, res.Stdout, res.Stderr)
			}
		})
	}
	if leaks := rootlessLeaksOf(u, tmp, ""); len(leaks) > 0 {
		t.Errorf("exec left %v", leaks)
	}
}

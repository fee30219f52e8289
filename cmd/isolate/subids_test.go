package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
)

// nobodyRange gives nobody a subordinate range in /etc/subuid and
// /etc/subgid where it has none, and puts both files back byte for byte
// when the test ends, however it ends. It returns the first uid and gid of
// nobody's range.
func nobodyRange(t *testing.T) (uid, gid int) {
	t.Helper()
	first := func(file string) (int, bool) {
		data, _ := os.ReadFile(file)
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Split(strings.TrimSpace(line), ":")
			if len(f) == 3 && (f[0] == "nobody" || f[0] == strconv.Itoa(nobody)) {
				start, err1 := strconv.Atoi(f[1])
				count, err2 := strconv.Atoi(f[2])
				if err1 == nil && err2 == nil && count >= 1 {
					return start, true
				}
			}
		}
		return 0, false
	}
	var starts [2]int
	for i, file := range []string{"/etc/subuid", "/etc/subgid"} {
		if start, ok := first(file); ok {
			starts[i] = start
			continue
		}
		orig, err := os.ReadFile(file)
		existed := err == nil
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if fi, err := os.Stat(file); err == nil {
			mode = fi.Mode().Perm()
		}
		t.Cleanup(func() {
			if !existed {
				os.Remove(file)
				return
			}
			if err := os.WriteFile(file, orig, mode); err != nil {
				t.Errorf("restore %s: %v", file, err)
			}
		})
		add := "nobody:524288:65536\n"
		if len(orig) > 0 && orig[len(orig)-1] != '\n' {
			add = "\n" + add
		}
		if err := os.WriteFile(file, append(append([]byte(nil), orig...), add...), mode); err != nil {
			t.Fatal(err)
		}
		starts[i] = 524288
	}
	return starts[0], starts[1]
}

// asNobodyInGroup runs the binary as nobody with a supplementary group
// (users, 100), which a box user that is a subordinate id must not keep.
func asNobodyInGroup(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(isolateBin, args...)
	cmd.Env, cmd.Dir = env, "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{100}}}
	return runResult(t, cmd)
}

func ownerOf(t *testing.T, path string) int {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return int(st.Uid)
}

// A user with a subordinate range (and uidmap's newuidmap and newgidmap)
// gets a box user of its own: box id N is the range's N-th uid and gid on
// the host, the user's groups are dropped, copy-in and copy-out work with
// the user's rights through the hand-over of /box, and nothing is left.
func TestRootlessSubordinateIDs(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"newuidmap", "newgidmap"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: install uidmap (scripts/deps.sh does)", tool)
		}
	}
	env, tmp := rootlessEnv(t)
	// Without them, whether user namespaces work for nobody at all here.
	off := filepath.Join(tmp, "no-subids")
	os.WriteFile(off, []byte("use_subids = 0\n"), 0o644)
	offEnv := append(append([]string(nil), env...), "ISOLATE_CONFIG="+off)
	if res := asNobodyInGroup(t, offEnv, "run", "--allow-rlimit-only", "--", "/bin/true"); res.Code != 0 {
		t.Skipf("a box of nobody's does not run on this kernel, so newuidmap cannot work here either: %s", res.Stderr)
	}
	subUID, subGID := nobodyRange(t)

	rw := filepath.Join(tmp, "rw")
	if err := os.Mkdir(rw, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(rw, 0o777)
	os.Chown(rw, nobody, nobody)
	in := filepath.Join(tmp, "in.txt")
	os.WriteFile(in, []byte("hello\n"), 0o600)
	os.Chown(in, nobody, nobody)
	out := filepath.Join(tmp, "out.txt")
	const marker = "subids.77"
	script := `id -u; id -g; id -G; cat in.txt; echo more >> in.txt && echo wrote-in; ` +
		`touch /box/rw/made /tmp/t; ln -s rw/made /box/link; mkdir -p /box/d/e/f && touch /box/d/e/f/g; ` +
		`umask 077; echo secret > out.txt; : ` + marker
	res := asNobodyInGroup(t, env, "run", "--allow-rlimit-only", "--json", "--box-id", "3", "--bind", rw+":/box/rw:rw",
		"--copy-in", in+":/box/in.txt", "--copy-out", "/box/out.txt:"+out, "--", "/bin/sh", "-c", script)
	var rep isolate.Report
	if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil {
		t.Fatalf("no report: exit %d %v\n%s", res.Code, err, res.Stderr)
	}
	expectStatus(t, &rep, isolate.StatusOK)
	if want := "1000\n1000\n1000\nhello\nwrote-in\n"; rep.Stdout != want {
		t.Errorf("inside the box:\n%s\nwant (uid, gid, no other group, the copy-in written to)\n%s", rep.Stdout, want)
	}
	if rep.Sandbox.User != "subordinate" || rep.BoxID != 3 {
		t.Errorf("sandbox.user %q box_id %d, want subordinate and 3", rep.Sandbox.User, rep.BoxID)
	}
	// Box id 3 is the range's fourth uid; the bind's own directory, a
	// mount in /box, is not handed over, nor is a link followed back.
	made := filepath.Join(rw, "made")
	if got := ownerOf(t, made); got != subUID+3 {
		t.Errorf("a file the program made in a read-write bind is uid %d's on the host, want %d (not nobody's %d)", got, subUID+3, nobody)
	}
	var st syscall.Stat_t
	if syscall.Lstat(made, &st) == nil && int(st.Gid) != subGID+3 {
		t.Errorf("its gid %d, want %d", st.Gid, subGID+3)
	}
	if got := ownerOf(t, rw); got != nobody {
		t.Errorf("the bound directory became uid %d's, want nobody's", got)
	}
	if data, err := os.ReadFile(out); err != nil || string(data) != "secret\n" || ownerOf(t, out) != nobody {
		t.Errorf("copy-out of a file of mode 0600: %q %v", data, err)
	}

	// exec: /box is a directory of nobody's, handed to each phase's box
	// user and back, and removed after the run.
	src := filepath.Join(tmp, "a.c")
	os.WriteFile(src, []byte("#include <stdio.h>\nint main(void) { printf(\"%d\\n\", getuid()); return 0; }\n"), 0o644)
	res = asNobodyInGroup(t, env, "exec", "--allow-rlimit-only", "--json", "--image", "host", "--lang", "c", src)
	var er struct {
		Status       string
		Compile, Run *isolate.Report
	}
	if err := json.Unmarshal([]byte(res.Stdout), &er); err != nil || er.Status != "OK" || er.Run == nil || er.Run.Stdout != "1000\n" ||
		er.Run.Sandbox.User != "subordinate" {
		t.Errorf("exec --lang c as nobody: exit %d %s %s", res.Code, res.Stdout, res.Stderr)
	}

	// use_subids = 0: the box user is the caller again.
	os.Remove(made)
	res = asNobodyInGroup(t, offEnv, "run", "--allow-rlimit-only", "--json", "--bind", rw+":/rw:rw", "--", "/bin/touch", "/rw/made")
	rep = isolate.Report{}
	if json.Unmarshal([]byte(res.Stdout), &rep) != nil || rep.Status != isolate.StatusOK || rep.Sandbox.User != "caller" || ownerOf(t, made) != nobody {
		t.Errorf("use_subids = 0: exit %d %s %s", res.Code, res.Stdout, res.Stderr)
	}

	// check says so.
	res = asNobodyInGroup(t, env, "check")
	if !strings.Contains(res.Stdout, "\nok   box user ") || !strings.Contains(res.Stdout, "uids "+strconv.Itoa(subUID)+"-") || !strings.Contains(res.Stdout, "\nok   box ") {
		t.Errorf("check as nobody with a range:\n%s%s", res.Stdout, res.Stderr)
	}
	if leaks := rootlessLeaks(tmp, marker); len(leaks) > 0 {
		t.Errorf("the runs left %v", leaks)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate"
)

// bindsReadAsTheCaller: what a member's box reads and writes through a
// handed-over bind it does with the member's rights: not a file of a box
// uid (root's box wrote one; every box uid's is planted), whichever box
// id the member's run gets; its own 0600 file, yes; what it writes is
// the member's on disk, also in a directory only the member may write.
func bindsReadAsTheCaller(t *testing.T, b *boundary) {
	dir := filepath.Join(b.shared, "binds-rights")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	handover := func(cred *syscall.Credential, args ...string) result {
		cmd := exec.Command(isolateBin, append([]string{"run"}, args...)...)
		cmd.Env, cmd.Dir = handoverEnv(b.svc.cliSock), b.shared
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		return runResult(t, cmd)
	}
	res := handover(nil, "--bind", dir+":/mnt:rw", "--", "/bin/sh", "-c", "umask 077; echo root-box-secret > /mnt/root-box-file")
	var st syscall.Stat_t
	if res.Code != 0 || syscall.Stat(filepath.Join(dir, "root-box-file"), &st) != nil || st.Uid < isolate.FirstUID {
		t.Fatalf("root's box writing through its bind: exit %d, %s (owner %d)", res.Code, res.Stderr, st.Uid)
	}
	for id := 0; id < 256; id++ {
		p := filepath.Join(dir, "planted-"+strconv.Itoa(id))
		os.WriteFile(p, []byte("planted-secret\n"), 0o600)
		os.Chown(p, isolate.FirstUID+id, isolate.FirstUID+id)
	}
	own := filepath.Join(dir, "member-own")
	os.WriteFile(own, []byte("member-own\n"), 0o600)
	os.Chown(own, memberUID, memberUID)
	out := filepath.Join(b.shared, "binds-out")
	os.Mkdir(out, 0o700)
	os.Chown(out, memberUID, memberUID)

	res = handover(member(memberUID), "--bind", dir+":/mnt", "--bind", out+":/out:rw", "--bind", own+":/own.txt", "--",
		"/bin/sh", "-c", "cat /mnt/* 2>/dev/null; cat /own.txt; echo written > /out/w")
	if res.Code != 0 || strings.Contains(res.Stdout, "secret") || strings.Count(res.Stdout, "member-own") != 2 {
		t.Errorf("a member's box reading its bind: exit %d, stdout %q, stderr %q: want only the member's own file", res.Code, res.Stdout, res.Stderr)
	}
	if err := syscall.Stat(filepath.Join(out, "w"), &st); err != nil || st.Uid != memberUID {
		t.Errorf("what a member's box wrote through its read-write bind: %v, owner %d, want the member's (%d)", err, st.Uid, memberUID)
	}
}

// bindsReadWithoutSupplementaryGroups: the box user has none of the
// member's supplementary groups (an idmapped mount maps its uid and
// primary gid only), so below a handed-over bind a file of one of them
// is read with others' bits, as SECURITY.md says: 0604 (the group
// denied) is readable in the box though the member cannot read it on
// the host; 0640 (others denied) is not, though the member can.
func bindsReadWithoutSupplementaryGroups(t *testing.T, b *boundary) {
	dir := filepath.Join(b.shared, "binds-groups")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	for name, mode := range map[string]os.FileMode{"group-denied": 0o604, "group-only": 0o640} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(name+"-content\n"), mode)
		os.Chmod(p, mode)
		os.Chown(p, 0, optInGroup) // a supplementary group of the member's
	}
	// On the host, as the member: the group's bits apply.
	host := exec.Command("/bin/sh", "-c", "cat "+dir+"/group-denied 2>/dev/null; cat "+dir+"/group-only")
	host.SysProcAttr = &syscall.SysProcAttr{Credential: member(memberUID)}
	if out, _ := host.Output(); string(out) != "group-only-content\n" {
		t.Fatalf("the member on the host reads %q, want the 0640 file only", out)
	}
	cmd := exec.Command(isolateBin, "run", "--bind", dir+":/mnt", "--", "/bin/sh", "-c", "cat /mnt/group-denied; cat /mnt/group-only 2>/dev/null; true")
	cmd.Env, cmd.Dir = handoverEnv(b.svc.cliSock), b.shared
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: member(memberUID)}
	if res := runResult(t, cmd); res.Code != 0 || res.Stdout != "group-denied-content\n" {
		t.Errorf("the member's box reads exit %d, %q (%s), want the 0604 file only: others' bits", res.Code, res.Stdout, res.Stderr)
	}
}

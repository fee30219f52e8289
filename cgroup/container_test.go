package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// containerHelperEnv makes the test binary the service's process
// (TestContainerHelper), started in a cgroup of its own: "ns" enters a new
// cgroup namespace and mount namespace and mounts cgroup2 afresh, as a
// container runtime does; "delegated" stays in the host's view, in a
// cgroup marked delegated as systemd marks one. Then, with a child of its
// own beside it, it readies the cgroup it finds it may prepare: the
// whole of prepareOwn on a v2 host ("prepare"), the move alone where the
// hierarchy offers no box controller, as a hybrid host's unified mount
// ("leave").
const containerHelperEnv = "ISOLATE_TEST_CONTAINER"

func TestContainerHelper(t *testing.T) {
	mode, ok := os.LookupEnv(containerHelperEnv)
	if !ok {
		t.Skip("run by TestContainerCgroup")
	}
	kind, step, _ := strings.Cut(mode, " ")
	runtime.LockOSThread() // the namespaces are this thread's
	say := func(format string, a ...any) {
		fmt.Printf("helper: "+format+"\n", a...)
		os.Exit(0)
	}
	mounts, err := cgroupMounts()
	if err != nil {
		say("%v", err)
	}
	mnt := mounts[""]
	if kind == "ns" {
		if err := unix.Unshare(unix.CLONE_NEWCGROUP | unix.CLONE_NEWNS); err != nil {
			say("unshare: %v", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			say("private: %v", err)
		}
		if mnt, err = os.MkdirTemp("", "isolate-cgns-"); err != nil {
			say("%v", err)
		}
		defer os.Remove(mnt)
		if err := unix.Mount("cgroup2", mnt, "cgroup2", 0, ""); err != nil {
			say("mount: %v", err)
		}
		defer unix.Unmount(mnt, unix.MNT_DETACH)
	}
	own, err := ownCgroups()
	if err != nil {
		say("%v", err)
	}
	root, what := ownPreparable(mnt, own[""])
	if root == "" {
		say("%s is not to prepare", own[""])
	}
	// A child of its own beside it, as a box's init started before the
	// move is.
	child := exec.Command("sleep", "1000")
	if err := child.Start(); err != nil {
		say("start a child: %v", err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	if step == "prepare" {
		err = prepareOwn(filepath.Join(mnt, root), what)
	} else {
		err = leaveOwnCgroup(filepath.Join(mnt, root), what)
	}
	own, _ = ownCgroups()
	childCg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", child.Process.Pid))
	fmt.Printf("helper: in %s, child in %s: %v\n", own[""], v2Line(string(childCg)), err)
}

// TestContainerCgroup: the service's process, alone (with a child of its
// own) in a container's cgroup namespace root or in a cgroup delegated to
// it, moves itself and the child into its leaf (and on a v2 host enables
// the box controllers there); with another process in that cgroup it
// refuses, naming it, and leaves it and the cgroup as they were; a cgroup
// neither a container's nor delegated is not prepared. On a hybrid host
// the unified mount offers no box controller, so the move alone is
// tested; the VM's container and systemd-unit checks run the service.
func TestContainerCgroup(t *testing.T) {
	requireRoot(t)
	mounts, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	mnt, ok := mounts[""]
	if !ok {
		t.Skip("no cgroup2 mount")
	}
	own, err := ownCgroups()
	if err != nil {
		t.Fatal(err)
	}
	if root, _ := ownPreparable(mnt, own[""]); root != "" {
		t.Skip("this test runs in a cgroup it could prepare already")
	}
	step := "leave"
	if DetectMode() == V2 {
		step = "prepare"
	}
	for _, kind := range []string{"ns", "delegated", "plain"} {
		t.Run(kind, func(t *testing.T) { testOwnCgroup(t, mnt, filepath.Join(mnt, own[""]), kind, step) })
	}
}

func testOwnCgroup(t *testing.T, mnt, parent, kind, step string) {
	ctr := filepath.Join(parent, fmt.Sprintf("isolate-test-own-%s-%d", kind, os.Getpid()))
	if err := os.Mkdir(ctr, 0o755); err != nil {
		t.Fatal(err)
	}
	leaf := filepath.Join(ctr, supervisorLeaf)
	t.Cleanup(func() {
		for _, d := range []string{leaf, ctr} {
			if err := unix.Rmdir(d); err != nil && err != unix.ENOENT {
				t.Errorf("rmdir %s: %v", d, err)
			}
		}
	})
	if kind == "delegated" {
		if err := unix.Setxattr(ctr, "trusted.delegate", []byte("1"), 0); err != nil {
			t.Skipf("mark %s delegated: %v", ctr, err)
		}
	}
	cg, err := os.Open(ctr)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	inCtr := &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	helper := func() string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestContainerHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), containerHelperEnv+"="+kind+" "+step)
		cmd.SysProcAttr = inCtr
		out, err := cmd.CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "helper: ") {
				return strings.TrimPrefix(line, "helper: ")
			}
		}
		t.Fatalf("helper: %v: %s", err, out)
		return ""
	}
	ctrPath := strings.TrimPrefix(ctr, mnt)
	// The cgroup as the helper sees it: the namespace's root, or its path.
	seen := ctrPath
	if kind == "ns" {
		seen = "/"
	}
	if kind == "plain" {
		if got, want := helper(), seen+" is not to prepare"; got != want {
			t.Errorf("in a cgroup neither a container's nor delegated: %q, want %q", got, want)
		}
		return
	}

	other := exec.Command("sleep", "1000")
	other.SysProcAttr = inCtr
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	got := helper()
	otherCg := readTrimmed(t, fmt.Sprintf("/proc/%d/cgroup", other.Process.Pid))
	other.Process.Kill()
	other.Wait()
	if want := "holds processes that are not isolate's (PID " + strconv.Itoa(other.Process.Pid) + ")"; !strings.Contains(got, want) {
		t.Errorf("with another process in the cgroup: %q, want %q", got, want)
	}
	if !strings.Contains(otherCg+"\n", "0::"+ctrPath+"\n") {
		t.Errorf("the other process is in %q, want 0::%s", otherCg, ctrPath)
	}
	if _, err := os.Stat(leaf); !os.IsNotExist(err) {
		t.Errorf("%s made though the process could not leave: %v", leaf, err)
	}
	if s := readTrimmed(t, filepath.Join(ctr, "cgroup.subtree_control")); s != "" {
		t.Errorf("subtree_control %q, want none enabled", s)
	}

	moved := filepath.Join(seen, supervisorLeaf)
	if got, want := helper(), "in "+moved+", child in "+moved+": <nil>"; got != want {
		t.Errorf("alone in the cgroup (with a child): %q, want %q", got, want)
	}
	if want := strings.Join(v2Controllers, " "); step == "prepare" && readTrimmed(t, filepath.Join(ctr, "cgroup.subtree_control")) != want {
		t.Errorf("subtree_control %q, want %q", readTrimmed(t, filepath.Join(ctr, "cgroup.subtree_control")), want)
	}
	if s := readTrimmed(t, filepath.Join(leaf, "cgroup.procs")); s != "" {
		t.Errorf("the leaf holds %q after the process exited", s)
	}
}

// v2Line is the cgroup v2 path in the text of /proc/PID/cgroup.
func v2Line(text string) string {
	for _, line := range strings.Split(text, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}

package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// checkWithoutRoot is `isolate check` for a user who is not root: what a
// run without root can do on this host (it runs one box to find out), how
// its limits would be enforced, and how to get the rest.
func checkWithoutRoot() error {
	fails := 0
	line := func(mark, what, detail string) {
		if mark == "FAIL" {
			fails++
		}
		fmt.Printf("%-4s %-22s %s\n", mark, what, detail)
	}
	var uts unix.Utsname
	unix.Uname(&uts)
	release := unix.ByteSliceToString(uts.Release[:])
	if kernelAtLeast(release, 5, 14) {
		line("ok", "kernel", release)
	} else {
		line("note", "kernel", release+": before 5.14, RLIMIT_NPROC counts every process of yours, not a box's")
	}
	cfg, err := isolate.LoadConfig()
	if err != nil {
		line("FAIL", "configuration", err.Error())
	}
	if sub := isolate.CheckSubIDs(cfg); sub.Used {
		fmt.Printf("note %-22s %s\n", "without root", "uid "+fmt.Sprint(os.Getuid())+": boxes run in user namespaces of yours; "+
			"persistent boxes, the ioi form and image builds are root's")
		line("ok", "box user", "a subordinate uid and gid of yours per box id (uids "+sub.UIDs+", gids "+sub.GIDs+
			", mapped by newuidmap and newgidmap): a host uid no one else has, your groups dropped")
	} else {
		fmt.Printf("note %-22s %s\n", "without root", "uid "+fmt.Sprint(os.Getuid())+": boxes run in user namespaces of yours, as you (no separate uid per box); "+
			"persistent boxes, the ioi form and image builds are root's")
		how := ""
		if sub.Remedy != "" {
			how = "; for a subordinate uid per box instead, as root: " + sub.Remedy
		}
		line("note", "box user", "you, with your groups (no subordinate ids: "+sub.Why+")"+how)
	}

	d := cgroup.FindDelegated("")
	allow := d.Dir == ""
	if d.Dir != "" {
		line("ok", "limits", "cgroup v2 subtree delegated to you at "+d.Dir+": memory, pids, CPU time and --cpus as under root")
	} else {
		line("note", "limits", "no cgroup subtree delegated to you ("+d.Why+"): runs need --allow-rlimit-only, "+
			"which enforces memory (RLIMIT_AS, or RLIMIT_DATA for the languages whose definition says so, per process), pids (RLIMIT_NPROC) and CPU time (RLIMIT_CPU, whole seconds, per process) "+
			"and refuses --cpus; on a cgroup v2 host, run under `"+cgroup.DelegateHint+"` for the cgroup's limits")
	}

	// A real box: the kernel says whether unprivileged user namespaces,
	// mounts and the filter work here.
	host, err := isolate.NewRootlessHost(nil, isolate.RootlessOptions{AllowRlimitOnly: allow})
	if err != nil {
		line("FAIL", "box", err.Error())
	} else {
		rep, err := host.Run(context.Background(), &api.Spec{Args: []string{"/bin/true"}}, isolate.IO{})
		switch {
		case err != nil:
			line("FAIL", "box", err.Error())
		case rep.Status != api.StatusOK:
			max, _ := os.ReadFile("/proc/sys/user/max_user_namespaces")
			line("FAIL", "box", string(rep.Status)+": "+rep.Message+" (user.max_user_namespaces="+strings.TrimSpace(string(max))+
				"; some distributions also restrict unprivileged user namespaces with AppArmor or kernel.unprivileged_userns_clone)")
		default:
			line("ok", "box", "/bin/true ran in a box of yours (user, PID, mount, network, IPC, UTS namespaces, seccomp)")
		}
	}

	ms, err := rootfs.ListImages()
	if err != nil {
		line("note", "images", err.Error())
	}
	for _, m := range ms {
		t, err := rootfs.OpenTree(m.Name)
		if err != nil {
			line("note", "image "+m.Name, "not usable by you: "+err.Error()+" (root's `isolate image build "+m.Name+"` opens the image trees to users)")
			continue
		}
		t.Close()
		line("ok", "image "+m.Name, "usable")
	}
	if fails > 0 {
		return failure(fmt.Sprintf("%d check(s) failed: runs without root will not work on this host", fails))
	}
	return nil
}

package cgroup

import (
	"strings"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate/hostfs"
)

// What FindDelegated says where no subtree is delegated: on a host whose
// controllers are v1, that; on a v2 host, a named directory that is not a
// cgroup is none. It only reads: no root needed.
func TestFindDelegatedRefusals(t *testing.T) {
	if mode := DetectMode(); mode != V2 {
		d := FindDelegated("")
		if d.Dir != "" || !strings.Contains(d.Why, "cgroup v1") {
			t.Errorf("on a %s host: %+v", mode, d)
		}
		return
	}
	for _, dir := range []string{"/tmp", "/sys/fs/cgroup", "relative"} {
		if d := FindDelegated(dir); d.Dir != "" || !strings.Contains(d.Why, "is not a cgroup below") {
			t.Errorf("%s: %+v", dir, d)
		}
	}
}

// TestUnderMounts: a cgroup path from /proc/self/cgroup is made relative
// to the root of its hierarchy's mount, as a container runtime binds the
// container's own cgroup at /sys/fs/cgroup/CONTROLLER.
func TestUnderMounts(t *testing.T) {
	ctr := "/libpod_parent/libpod-1"
	mounts := []hostfs.Mount{
		{Point: "/sys/fs/cgroup/memory", FSType: "cgroup", Super: "rw,memory", Root: ctr},
		{Point: "/sys/fs/cgroup/cpu,cpuacct", FSType: "cgroup", Super: "rw,cpu,cpuacct", Root: ctr},
		{Point: "/sys/fs/cgroup/pids", FSType: "cgroup", Super: "rw,pids", Root: "/"},
		{Point: "/sys/fs/cgroup/blkio", FSType: "cgroup", Super: "rw,blkio", Root: "/elsewhere"},
		{Point: "/sys/fs/cgroup/unified", FSType: "cgroup2", Super: "rw", Root: ctr},
		{Point: "/mnt/memory", FSType: "cgroup", Super: "rw,memory", Root: "/"},
	}
	own := map[string]string{"memory": ctr, "cpu": ctr + "/isolate-supervisor", "cpuacct": ctr, "pids": ctr,
		"blkio": ctr, "": "/libpod_parent/libpod-10"}
	underMounts(own, mounts)
	want := map[string]string{"memory": "/", "cpu": "/isolate-supervisor", "cpuacct": "/", "pids": ctr,
		"blkio": ctr, "": "/libpod_parent/libpod-10"}
	for k, w := range want {
		if own[k] != w {
			t.Errorf("%q: %q, want %q", k, own[k], w)
		}
	}
}

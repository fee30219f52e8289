package cgroup

import (
	"strings"
	"testing"
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

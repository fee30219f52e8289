package isolate

import (
	"testing"
)

// UnheldBoxCgroups lists the box cgroups no run holds (no run claims
// them: cgroup_claims.go): what a run or a pool left behind. Boxes of
// other runs meanwhile are claimed and not listed.
func UnheldBoxCgroups(h *Host) ([]string, error) {
	m, err := h.Cgroups()
	if err != nil {
		return nil, err
	}
	names := m.Boxes()
	if len(names) == 0 {
		return nil, nil
	}
	claims, err := openCgroupClaims(h.lockDir(), m)
	if err != nil {
		return nil, err
	}
	defer claims.Close()
	var left []string
	for _, name := range names {
		id, ok := cgroupBoxID(name)
		if !ok {
			continue
		}
		free, err := claimCgroup(claims, id, false)
		if err != nil {
			return nil, err
		}
		if free {
			left = append(left, name)
			unclaimCgroup(claims, id)
		}
	}
	return left, nil
}

// StartInitFromSelf makes this process's boxes start their init from
// /proc/self/exe, as builds without the small init do, until t ends.
func StartInitFromSelf(t testing.TB) {
	saved := smallInit
	smallInit = func() string { return selfExe }
	t.Cleanup(func() { smallInit = saved })
}

// SmallInitRefused is how many inits started from /proc/self/exe because
// the kernel refused the small init.
func SmallInitRefused() int64 { return smallInitRefused.Load() }

// Pooled tells whether a prepared run may take a box the pool built
// ahead.
func Pooled(p *Prepared) bool {
	_, ok := p.key()
	return ok
}

package isolate

import (
	"strconv"
	"strings"
)

// UnheldBoxCgroups lists the box cgroups no run holds (their box id's
// lock is free): what a run or a pool left behind. Boxes of other
// processes that run meanwhile hold their locks and are not listed.
func UnheldBoxCgroups(h *Host) ([]string, error) {
	m, err := h.Cgroups()
	if err != nil {
		return nil, err
	}
	var left []string
	for _, name := range m.Boxes() {
		id, err := strconv.Atoi(strings.TrimPrefix(name, "box-"))
		if err != nil {
			continue
		}
		l, free, err := tryLockBox(id)
		if err != nil {
			return nil, err
		}
		if free {
			left = append(left, name)
			l.release()
		}
	}
	return left, nil
}

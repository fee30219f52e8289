package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
)

// SetLimits sets limits l on a box created without them (Create with zero
// Limits): a box built ahead of its command gets its command's limits
// when one claims it. A zero field leaves that limit as it is. It writes
// the few files itself, in about half containerd's time for the same
// limits (BenchmarkSetLimits).
func (b *Box) SetLimits(l Limits) error {
	var errs []error
	write := func(ctl, file, value string) {
		if err := writeFile(filepath.Join(b.dirs[ctl], file), value); err != nil {
			errs = append(errs, fmt.Errorf("set limit: %w", err))
		}
	}
	// writeIfAny writes a file the kernel has only with swap accounting.
	writeIfAny := func(ctl, file, value string) {
		err := writeFile(filepath.Join(b.dirs[ctl], file), value)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("set limit: %w", err))
		}
	}
	quota := strconv.FormatInt(int64(l.CPUs*cfsPeriod), 10)
	mem := strconv.FormatInt(l.Memory, 10)
	if b.mode.usesV1() {
		if l.Memory > 0 {
			// As Create: memory and memory+swap alike, so no swap. The
			// memory limit first: memsw may never be below it.
			write("memory", "memory.limit_in_bytes", mem)
			writeIfAny("memory", "memory.memsw.limit_in_bytes", mem)
		}
		if l.Pids > 0 {
			write("pids", "pids.max", strconv.FormatInt(l.Pids, 10))
		}
		if l.CPUs > 0 {
			write("cpu", "cpu.cfs_period_us", strconv.Itoa(cfsPeriod))
			write("cpu", "cpu.cfs_quota_us", quota)
		}
		return errors.Join(errs...)
	}
	if l.Memory > 0 {
		write("", "memory.max", mem)
		writeIfAny("", "memory.swap.max", "0")
	}
	if l.Pids > 0 {
		write("", "pids.max", strconv.FormatInt(l.Pids, 10))
	}
	if l.CPUs > 0 {
		write("", "cpu.max", quota+" "+strconv.Itoa(cfsPeriod))
	}
	return errors.Join(errs...)
}

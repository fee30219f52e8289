package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// SetLimits sets limits l: Create's, and those of a box created without
// them (a box built ahead of its command gets its command's limits when
// one claims it). A zero field leaves that limit as it is. It writes the
// few files itself, through the descriptors Create kept open for a box
// without limits (~10 µs against ~130 µs opening each file and ~150 µs
// for containerd's cgroup1, BenchmarkSetLimits), else opening only the
// files it writes.
func (b *Box) SetLimits(l Limits) error {
	files := b.limits
	if files == nil {
		files = &limitFiles{}
		defer files.close()
	}
	var errs []error
	// write writes value to the file kept open in f, or opens it as name
	// in ctl's directory. An optional file is one the kernel has only
	// with swap accounting.
	write := func(f *ctlFile, ctl, name, value string, optional bool) {
		if f.path == "" && f.err == nil {
			*f = keepOpen(filepath.Join(b.dirs[ctl], name), unix.O_WRONLY)
		}
		if optional && errors.Is(f.err, fs.ErrNotExist) {
			return
		}
		if err := f.write(value); err != nil {
			errs = append(errs, fmt.Errorf("set limit: %w", err))
		}
	}
	v1 := b.mode.usesV1()
	if l.Memory > 0 {
		// Memory and memory+swap alike (v1), no swap (v2). The memory
		// limit first: v1's memsw may never be below it.
		mem := strconv.FormatInt(l.Memory, 10)
		if v1 {
			write(&files.memory, "memory", "memory.limit_in_bytes", mem, false)
			write(&files.swap, "memory", "memory.memsw.limit_in_bytes", mem, true)
		} else {
			write(&files.memory, "", "memory.max", mem, false)
			write(&files.swap, "", "memory.swap.max", "0", true)
		}
	}
	if l.Pids > 0 {
		write(&files.pids, b.pidsCtl(), "pids.max", strconv.FormatInt(l.Pids, 10), false)
	}
	if l.CPUs > 0 {
		if !b.withCPU {
			return fmt.Errorf("set limit: box %s was made without a CPU limit, and has no cpu cgroup", b.name)
		}
		quota := strconv.FormatInt(int64(l.CPUs*cfsPeriod), 10)
		if v1 {
			write(&files.cpuPeriod, "cpu", "cpu.cfs_period_us", strconv.Itoa(cfsPeriod), false)
			write(&files.cpuQuota, "cpu", "cpu.cfs_quota_us", quota, false)
		} else {
			write(&files.cpuQuota, "", "cpu.max", quota+" "+strconv.Itoa(cfsPeriod), false)
		}
	}
	return errors.Join(errs...)
}

// pidsCtl is the key of the pids controller's directory in dirs.
func (b *Box) pidsCtl() string {
	if b.mode.usesV1() {
		return "pids"
	}
	return ""
}

// limitFiles are the files that hold a box's limits, opened for writing.
type limitFiles struct {
	memory, swap, pids ctlFile
	// cpuQuota is v2's cpu.max, quota and period at once; cpuPeriod is
	// v1's alone.
	cpuQuota, cpuPeriod ctlFile
}

func (b *Box) openLimitFiles() *limitFiles {
	open := func(ctl, name string) ctlFile {
		return keepOpen(filepath.Join(b.dirs[ctl], name), unix.O_WRONLY)
	}
	if b.mode.usesV1() {
		return &limitFiles{
			memory:    open("memory", "memory.limit_in_bytes"),
			swap:      open("memory", "memory.memsw.limit_in_bytes"),
			pids:      open("pids", "pids.max"),
			cpuQuota:  open("cpu", "cpu.cfs_quota_us"),
			cpuPeriod: open("cpu", "cpu.cfs_period_us"),
		}
	}
	return &limitFiles{
		memory:   open("", "memory.max"),
		swap:     open("", "memory.swap.max"),
		pids:     open("", "pids.max"),
		cpuQuota: open("", "cpu.max"),
	}
}

func (f *limitFiles) close() {
	for _, c := range []*ctlFile{&f.memory, &f.swap, &f.pids, &f.cpuQuota, &f.cpuPeriod} {
		c.close()
	}
}

package boxinit

// #define _GNU_SOURCE
// #include <sched.h>
// #include "procs.h"
import "C"

import (
	"runtime"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/internal/dirent"
)

// TimerSlack is how late the kernel may end the timed sleeps of this
// process's threads (procs.h); programs in boxes keep the kernel's default.
const TimerSlack = time.Duration(C.ISOLATE_TIMER_SLACK_NS)

// RestoreCPUs gives every thread of this process back the caller's CPU
// affinity, which procs.c narrowed to one CPU so that the Go runtime boots
// with one P. Call it first thing (MaybeInit does): threads, and so the
// children they start, must never keep the narrowed mask.
func RestoreCPUs() {
	if C.isolate_cpus_narrowed == 0 {
		return
	}
	set := callerCPUs()
	// Threads the runtime started while booting inherited the narrowed
	// mask; one started while this runs might be missed by one listing,
	// so list until a pass finds every thread restored.
	task, err := unix.Open("/proc/self/task", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		task = -1
	} else {
		defer unix.Close(task)
	}
	done := map[int]bool{}
	for {
		tids := threadIDs(task)
		fresh := 0
		for _, tid := range tids {
			if !done[tid] {
				unix.SchedSetaffinity(tid, set)
				done[tid] = true
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
	}
	C.isolate_cpus_narrowed = 0
	narrowedCPUs = set.Count()
}

// narrowedCPUs is the caller's CPU count once RestoreCPUs has run on a
// narrowed start (runtime.NumCPU then says 1); else 0.
var narrowedCPUs int

// NumCPU is how many CPUs the caller lets this process (and so a box) use:
// runtime.NumCPU counted the narrowed mask.
func NumCPU() int {
	if narrowedCPUs > 0 {
		return narrowedCPUs
	}
	return runtime.NumCPU()
}

func callerCPUs() *unix.CPUSet {
	var set unix.CPUSet
	n := int(unsafe.Sizeof(C.isolate_caller_cpus))
	if n > int(unsafe.Sizeof(set)) {
		n = int(unsafe.Sizeof(set))
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&set)), n), unsafe.Slice((*byte)(unsafe.Pointer(&C.isolate_caller_cpus)), n))
	return &set
}

// threadIDs lists this process's threads from task, an open
// /proc/self/task (-1: none), read again from its start.
func threadIDs(task int) []int {
	if task < 0 {
		return nil
	}
	if _, err := unix.Seek(task, 0, 0); err != nil {
		return nil
	}
	names, _ := dirent.Names(task)
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

package main

import (
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// timerSlack is how late the kernel may end the service's timed sleeps.
//
// While any goroutine runs, the Go runtime's monitor thread (sysmon)
// sleeps 20 µs at a time, and the service's goroutines run in short
// bursts all through a run. On the project's 2-CPU VMs, where a wake-up
// costs ~40 µs of CPU, that was ~27 wake-ups and 1 ms of CPU per
// handed-over run, a fifth of the service's own (docs/PERFORMANCE.md,
// Session G). With this slack the kernel batches those sleeps with other
// timers. The service's own timers (limits, deadlines) already wait in the
// network poller at millisecond resolution; they may end up to this much
// later. The programs in the boxes keep the kernel's default
// (isolate/init_main.c).
const timerSlack = time.Millisecond

// relaxTimerSlack gives every thread of this process timerSlack; threads
// started later inherit it from the thread that starts them.
func relaxTimerSlack() {
	unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(timerSlack), 0, 0, 0)
	value := []byte(strconv.FormatInt(int64(timerSlack), 10))
	// A thread started while this runs may inherit the old slack and be
	// missed by one listing: list until a pass finds nothing new.
	done := map[string]bool{}
	for {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return
		}
		fresh := 0
		for _, t := range tasks {
			if done[t.Name()] {
				continue
			}
			done[t.Name()] = true
			fresh++
			// (Only /proc/TID has the file, not /proc/self/task/TID.)
			os.WriteFile("/proc/"+t.Name()+"/timerslack_ns", value, 0)
		}
		if fresh == 0 {
			return
		}
	}
}

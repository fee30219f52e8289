package isolate

import (
	"os"
	"time"
)

// A box at its memory limit whose allocations the kernel can always satisfy
// by evicting the box's own clean file pages (the interpreter's or the
// program's code, its page cache) never reaches the OOM killer: reclaim
// keeps making "progress", and the program faults the same pages back in,
// burning a CPU until the wall limit. Measured on a v1 host without swap: a
// bomb touching its own 48 MiB of code at --mem 256M stayed pinned within
// 128 KiB of the limit, refaulting 300-500 thousand pages a second, while
// its anonymous memory grew by 1 MiB a second. The kernel offers no knob
// that makes it give up earlier (no swap: swappiness is moot; memsw is
// already the limit; memory.high only throttles; per-cgroup PSI exists on
// v2 only), so the supervisor watches for it and ends the run as ML.

// thrashTick is how often a running box's memory is looked at; the first
// look is one tick after the start, so short runs cost nothing.
const thrashTick = 100 * time.Millisecond

// thrashTicks is how many ticks in a row the box must be thrashing.
const thrashTicks = 10

// thrashDetector tells a box stuck reclaiming its own pages at the limit:
// for thrashTicks ticks in a row its charge was within limit/32 of the
// limit and it refaulted at least limit/40 bytes of file pages (a quarter
// of its limit a second; thrashing measured 20-30 times more). Refaults
// count pages the box evicted and needed again; a program streaming
// through a file larger than its limit does not refault and is left alone.
type thrashDetector struct {
	limit    int64 // bytes
	ticks    int   // consecutive thrashing ticks
	refaults int64 // the kernel's counter at the last tick; -1 before the first
}

func newThrashDetector(limit int64) *thrashDetector {
	return &thrashDetector{limit: limit, refaults: -1}
}

// thrashing takes one tick's reading and tells whether the box has been
// thrashing for thrashTicks ticks in a row.
func (d *thrashDetector) thrashing(usage, refaults int64) bool {
	prev := d.refaults
	d.refaults = refaults
	refaulted := (refaults - prev) * int64(os.Getpagesize())
	if prev >= 0 && usage >= d.limit-d.limit/32 && refaulted >= d.limit/40 {
		d.ticks++
	} else {
		d.ticks = 0
	}
	return d.ticks >= thrashTicks
}

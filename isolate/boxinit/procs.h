/*
 * What the constructor of every isolate process (not a box's init) sets
 * before the Go runtime starts: procs.c.
 */
#ifndef ISOLATE_PROCS_H
#define ISOLATE_PROCS_H

/* How late the kernel may end the timed sleeps of isolate's own threads,
 * in ns (the kernel's default is 50 us). While any goroutine runs, the Go
 * runtime's monitor thread (sysmon) sleeps 20 us at a time, and after each
 * sleep takes the P from a goroutine in a system call, which wakes
 * another thread to run the rest. On a 2-CPU VM, where a
 * wake-up costs ~40 us of CPU, that was 43-60 sleeps in a one-shot
 * `isolate run` and a fifth of the service's own CPU. With 1 ms, the
 * supervisor's timers (limits, which already wait at millisecond
 * resolution in Go's network poller) may end up to 1 ms later. Boxes'
 * inits set the kernel's default back for the programs (init_main.c). */
#define ISOLATE_TIMER_SLACK_NS 1000000

#include <sched.h>

/* The caller's CPU affinity, and whether isolate_narrow_cpus narrowed
 * this process's to one CPU (procs.c). */
extern cpu_set_t isolate_caller_cpus;
extern int isolate_cpus_narrowed;

void isolate_narrow_cpus(void);
void isolate_relax_timers(void);

#endif

/*
 * One P for the Go runtime of the supervisor, from its first instruction.
 *
 * The supervisor waits on the kernel; it never computes in parallel. Yet
 * the Go runtime sizes its scheduler (GOMAXPROCS) from the CPUs in the
 * process's affinity mask, and with two or more Ps every goroutine it
 * starts while booting wakes an idle thread, which spins, faults in its
 * stack and sleeps again: time and page faults on every `isolate run`
 * that one P never spends. The environment cannot be changed here (Go
 * reads it from the ELF stack, not from environ), and runtime.GOMAXPROCS
 * in main comes after the boot it should have shaped.
 *
 * So this constructor, which runs before the Go runtime, narrows the
 * affinity to the CPU it runs on and keeps the caller's mask; the
 * runtime then counts one CPU. Go code restores the caller's mask on every
 * thread first thing (RestoreCPUs in procs.go), before any child is
 * started, so nothing of the run, and no program, ever sees the narrowed
 * mask. A GOMAXPROCS the caller set is left alone.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "procs.h"

cpu_set_t isolate_caller_cpus;
int isolate_cpus_narrowed;

/* Called by init.c's constructor when this process is not a box's init
 * (whose mask the program inherits: it must stay the caller's). */
void isolate_narrow_cpus(void) {
	if (getenv("GOMAXPROCS"))
		return;
	if (sched_getaffinity(0, sizeof isolate_caller_cpus, &isolate_caller_cpus) < 0 ||
	    CPU_COUNT(&isolate_caller_cpus) < 2)
		return;
	int cpu = sched_getcpu();
	if (cpu < 0 || !CPU_ISSET(cpu, &isolate_caller_cpus))
		return;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	if (sched_setaffinity(0, sizeof one, &one) == 0)
		isolate_cpus_narrowed = 1;
}

/* Called by init.c's constructor too: every thread the Go runtime starts
 * inherits the slack (procs.h). */
void isolate_relax_timers(void) { prctl(PR_SET_TIMERSLACK, ISOLATE_TIMER_SLACK_NS, 0, 0, 0); }

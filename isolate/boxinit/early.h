/*
 * A box's init started early: by the isolate command's constructor, for a
 * run it makes in-process, before the Go runtime starts (init_main.c).
 * Its namespaces are made while Go starts and the run is prepared; the
 * supervisor then writes its ID maps and sends, with the box part, the
 * descriptors a spawned init gets at its exec (earlyinit.go).
 */
#ifndef ISOLATE_EARLY_H
#define ISOLATE_EARLY_H

/* The early init, if one was started (pid > 0): the supervisor's ends of
 * its control socket, status pipe and ID maps pipe, and the clone flags
 * its namespaces were made with. */
struct isolate_early_init {
	int pid, pidfd, ctl, status, maps;
	unsigned long flags;
};
extern struct isolate_early_init isolate_early_init;

/* isolate_start_early_init forks the early init with clone flags flags
 * (nothing when it cannot: the run spawns its init as usual). envp is the
 * environment, which the init's copy of this process's memory forgets. */
void isolate_start_early_init(unsigned long flags, char **envp);

#endif

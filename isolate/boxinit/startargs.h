/*
 * argc, argv and envp for an ELF constructor under musl, which calls
 * constructors without arguments (glibc passes them). Nothing has touched
 * the environment yet, so environ is still where the kernel put it: right
 * after argv's terminating NULL, with argc in the word before argv[0]
 * (the ELF start-up stack). argv's entries are pointers, never a small
 * count, so the first n whose slot holds n is argc. Used by the box's init
 * (init_main.c) and the CLI's handover (cmd/isolate/handover.c).
 */
#ifndef ISOLATE_STARTARGS_H
#define ISOLATE_STARTARGS_H

extern char **environ;

static inline void isolate_start_args(long *argc, char ***argv, char ***envp) {
	char **env = environ;
	long n = 0;
	while ((long)env[-2 - n] != n)
		n++;
	*argc = n;
	*argv = env - 1 - n;
	*envp = env;
}

#endif

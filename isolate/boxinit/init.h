/*
 * The box's init, shared by its files: init_main.c (the entry point, the
 * namespaces, PID 1's control loop), init_io.c (the plan reader, status
 * messages), init_fs.c (the box part's operations: file system, host
 * name, network), init_proc.c (the command part's operations, starting
 * the program). protocol.h is what it shares with the supervisor.
 */
#ifndef ISOLATE_INIT_H
#define ISOLATE_INIT_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "protocol.h"

/* One record of the plan (protocol.h). Every string is also
 * NUL-terminated; len holds its length (it may hold NUL bytes). */
struct op {
	enum isolate_op type;
	const char *step;
	uint32_t nints, nstrs;
	uint64_t *ints;
	char **strs;
	uint32_t *len;
};

/* The name of an operation, for messages. */
const char *init_op_name(enum isolate_op type);

/* The plan's reader: a byte stream and the descriptors that came with it.
 * fd -1 reads only what buf holds (the protocol test). */
struct plan_reader {
	int fd;
	char *buf;
	size_t cap, len, pos;
	int *fds; /* received descriptors, in order: the plan names them by index */
	size_t nfds, capfds;
	const char *why; /* what was wrong with a record read_op refused */
};

/* read_op reads the next record into op; -1 with errno (and r->why when
 * the record itself was malformed) if there is none. */
int init_read_op(struct plan_reader *r, struct op *op);

/* Status messages to the supervisor (fd ISOLATE_FD_STATUS), one JSON line
 * each. */
void init_put(const char *s);
void init_put_str(const char *key, const char *s);
void init_put_num(const char *key, long long v);
void init_flush(void); /* ends the message and sends what is put */
void init_send(void);  /* sends what is put: whole messages, ended */

/* init_untrace lets go of a process of the box stopped as init's tracee
 * (it asked PTRACE_TRACEME: init is its parent) with the signal it stopped
 * for, but for the SIGTRAP a traced execve raises: init traces nothing, so
 * the process gets what it would have untraced (a signal that kills it
 * kills it: SG, not an exit). 1 when ws was such a stop (keep waiting). */
int init_untrace(pid_t pid, int ws);

/* init_put_exited sends "exited" for the program (id 0) or a session's
 * command id: its wait status, wall time and rusage; with step, it could
 * not be started (init_prog.argv[0] for execve), errno err. */
void init_put_exited(uint64_t id, int ws, int64_t wall, const struct rusage *ru, const char *step, int err);

/* init_fail reports a failed step and ends init. */
void init_fail(const char *step, int err) __attribute__((noreturn));
/* init_fail_op reports a failed operation: its step, the op, the path it
 * worked on, and errno; and ends init. */
void init_fail_op(const struct op *op, const char *path, int err) __attribute__((noreturn));

/* init_fail_misplaced reports an operation sent in the wrong part of the
 * plan ("box" or "command"). */
void init_fail_misplaced(const struct op *op, const char *part) __attribute__((noreturn));

/* Stage timers, sent with "started". */
enum init_stage { STAGE_NAMESPACES, STAGE_MAPS, STAGE_PLAN, STAGE_SETUP, STAGE_EXEC, STAGE_COUNT };
void init_mark(enum init_stage s);
void init_mark_start(void);
void init_report_stages(void);

/* PID 1's pid in the host's PID namespace: the supervisor reaches the
 * box's root through /proc/PID/root (--copy-in, --copy-out). */
extern int init_box_host_pid;
/* init_rootless: the box's user namespace was made by a user who is not
 * root (run_init). */
extern int init_rootless;
/* init_groups_kept: setgroups is denied in it (the user wrote its own
 * maps): the program keeps the caller's supplementary groups, which it
 * cannot drop. Not so when newgidmap mapped a subordinate gid. */
extern int init_groups_kept;

/* init_session: the box serves many commands (SESSION, init_session.c). */
extern int init_session;
/* init_run_session is PID 1's loop in a session's box, once it is built;
 * its exit status. */
int init_run_session(const sigset_t *oldmask, int sfd, struct plan_reader *plan);
/* The box part's operations (init_fs.c); 1 at BOX_END. */
int init_box_op(struct op *op, int *announce);

/* The command part's operations (init_proc.c); 1 at END. */
int init_command_op(struct op *op, struct plan_reader *r);

/* The program and how to start it, filled by the command part. */
struct program {
	char **argv, **envp;
	const char *dir;
	uid_t uid;
	gid_t gid;
	rlim_t rlimits[RLIM_NLIMITS];
	unsigned char has_rlimit[RLIM_NLIMITS];
	int *cgroup_fds; /* v1: the tasks files the program writes itself into */
	size_t ncgroup, capcgroup;
	int cgroup_dir;  /* v2: the cgroup the program is forked into, or -1 */
	const char *filter;
	uint32_t filter_len;
	int notify_sock; /* -1: no listener wanted */
	int stdio[3]; /* received descriptors for the program's fd 0, 1, 2; -1: init's own */
	int stderr_to_stdout;
	int hold; /* keep the box after the program until the supervisor is done (--copy-out) */
	int tell_start; /* tell the program's start at once (init_main.c) */
	uint64_t id;    /* a session's command: its number (init_session.c) */
	char **hand_over; /* HAND_OVER's directories (NULL-terminated), or NULL */
	int hand_back;    /* give them back to uid 0 after the program */
};
extern struct program init_prog;

/* init_add_fd appends fd to a grown array; -1 (ENOMEM) if it cannot. */
int init_add_fd(int **fds, size_t *n, size_t *cap, int fd);

/* Descriptors init keeps for itself go at or above this number, clear of
 * those an early init is given by number (PLACE_FD). */
#define INIT_FD_HIGH 64

/* init_place_fd gives the first received descriptor not yet placed the
 * number target (PLACE_FD); -1 with errno if it cannot. */
int init_place_fd(struct plan_reader *r, int target);

/* Memory for init (init_io.c): zeroed, from a static arena in a box's
 * init (init_arena_on), else from malloc; init_free ignores the arena's. */
extern int init_arena_on;
void *init_alloc(size_t n);
void init_free(void *p);
/* init_arena_warm touches the arena's next n bytes, so that what a box
 * built ahead takes for its command is mapped while it waits for it. */
void init_arena_warm(size_t n);

/* init_hand_trees gives every file of each directory tree of dirs (on
 * its mount alone, no link followed) to uid and gid (HAND_OVER); it fails
 * init on an error. */
void init_hand_trees(char **dirs, uid_t uid, gid_t gid);

/* init_drop_bounding_set empties PID 1's capability bounding set, for
 * the program's process to inherit (init_proc.c). */
void init_drop_bounding_set(void);

/* A pool's box starts its program's process before the command, with the
 * filter its commands normally get loaded (init_proc.c):
 * init_prepare_filter records the filter (PREPARE), init_prepare_program
 * starts the process once the box is built. */
void init_prepare_filter(const struct op *op);
void init_prepare_program(const sigset_t *oldmask);

/* init_start_program starts the program (clone3, CLONE_VM|CLONE_VFORK):
 * its pid, or -1 with errno. If it could not be started, *start_step
 * names the step that failed and *start_err is its errno. */
pid_t init_start_program(const void *oldmask, const char **start_step, int *start_err);

/* clone_run starts a process running fn(arg) on stack (see init_proc.c). */
struct clone3_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};
long init_clone_run(struct clone3_args *args, char *stack, size_t size, void (*fn)(void *), void *arg);

int64_t init_now_ns(void);

#endif

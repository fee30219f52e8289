/*
 * A session's box (SESSION in the box part): PID 1 stays and starts each
 * command the supervisor sends, one after another or side by side, until
 * the supervisor closes fd 3. Every command is a fresh process in the same
 * namespaces, file system and cgroup, started as a one-shot box starts its
 * program (init_proc.c); what a command leaves running stays until it ends,
 * is signalled, or the session ends.
 *
 * Between commands the supervisor may send SIGNAL records. For each
 * command init says "started" {id} (or "exited" {id, exec_err} if it could
 * not be started) and "exited" {id, ws, wall_ns, rusage} when its main
 * process ends: the rusage is that process's and its waited-for
 * children's. Orphans are reaped without a word.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "init.h"

int init_session;

/* A command whose main process runs. */
struct running {
	uint64_t id;
	pid_t pid;
	int64_t start;
};

static struct running *running;
static size_t nrunning, caprunning;

/* free_op gives back what init_read_op allocated for op. */
static void free_op(struct op *op) {
	init_free((void *)op->step);
	for (uint32_t i = 0; i < op->nstrs; i++)
		init_free(op->strs[i]);
	init_free(op->strs);
	init_free(op->ints);
	init_free(op->len);
}

/* The records of the command being read, freed once it has started. */
static struct op *cmd_ops;
static size_t ncmd_ops, capcmd_ops;

static int keep_op(const struct op *op) {
	if (ncmd_ops == capcmd_ops) {
		size_t c = capcmd_ops ? capcmd_ops * 2 : 16;
		struct op *p = realloc(cmd_ops, c * sizeof *p);
		if (!p)
			return -1;
		cmd_ops = p, capcmd_ops = c;
	}
	cmd_ops[ncmd_ops++] = *op;
	return 0;
}

/* start_command starts the command init_prog describes, then forgets it:
 * the descriptors that came with it are closed, its records freed. */
static void start_command(const sigset_t *oldmask, struct plan_reader *plan) {
	if (!init_prog.argv || !init_prog.argv[0])
		init_fail("decode plan: no program", EINVAL);
	int stdio[3] = {init_prog.stdio[0], init_prog.stdio[1], init_prog.stdio[2]};
	const char *step;
	int err;
	int64_t start = init_now_ns();
	pid_t pid = init_start_program(oldmask, &step, &err);
	if (step) {
		struct rusage ru;
		int ws;
		while (wait4(pid, &ws, 0, &ru) < 0 && errno == EINTR)
			;
		init_put_exited(init_prog.id, 127 << 8, init_now_ns() - start, &ru, step, err);
	} else {
		if (nrunning == caprunning) {
			size_t c = caprunning ? caprunning * 2 : 16;
			struct running *p = realloc(running, c * sizeof *p);
			if (!p) {
				kill(pid, SIGKILL);
				init_fail("record the command", ENOMEM);
			}
			running = p, caprunning = c;
		}
		running[nrunning++] = (struct running){init_prog.id, pid, start};
		init_put("{\"type\":\"" ISOLATE_MSG_STARTED "\"");
		init_put_num("id", (long long)init_prog.id);
		init_put_num("pid", init_box_host_pid);
		init_put_num("exec_ns", init_now_ns());
		init_put("}");
		init_flush();
	}
	/* init_start_program closed the streams; the rest (cgroup files) go
	 * now. */
	for (size_t i = 0; i < plan->nfds; i++) {
		int fd = plan->fds[i];
		if (fd != stdio[0] && fd != stdio[1] && fd != stdio[2])
			close(fd);
	}
	plan->nfds = 0;
	init_free(init_prog.cgroup_fds);
	for (size_t i = 0; i < ncmd_ops; i++)
		free_op(&cmd_ops[i]);
	ncmd_ops = 0;
	memset(&init_prog, 0, sizeof init_prog);
	init_prog.notify_sock = init_prog.cgroup_dir = -1;
	init_prog.stdio[0] = init_prog.stdio[1] = init_prog.stdio[2] = -1;
}

/* signal_command sends sig to command id's process group (0: to every
 * process of the box). */
static void signal_command(uint64_t id, int sig) {
	if (id == 0) {
		kill(-1, sig);
		return;
	}
	for (size_t i = 0; i < nrunning; i++)
		if (running[i].id == id) {
			/* Each command leads its own process group (setsid). */
			if (kill(-running[i].pid, sig) < 0)
				kill(running[i].pid, sig);
			return;
		}
}

/* reap reaps every process that has ended, reporting commands. */
static void reap(void) {
	for (;;) {
		struct rusage ru;
		int ws;
		pid_t w = wait4(-1, &ws, WNOHANG, &ru);
		if (w <= 0)
			return;
		if (init_untrace(w, ws))
			continue;
		for (size_t i = 0; i < nrunning; i++)
			if (running[i].pid == w) {
				init_put_exited(running[i].id, ws, init_now_ns() - running[i].start, &ru, NULL, 0);
				running[i] = running[--nrunning];
				break;
			}
	}
}

int init_run_session(const sigset_t *oldmask, int sfd, struct plan_reader *plan) {
	/* The arena is for one box's one command; a session's commands come
	 * and go. */
	init_arena_on = 0;
	for (;;) {
		struct pollfd pf[2] = {{.fd = sfd, .events = POLLIN}, {.fd = ISOLATE_FD_CONTROL, .events = POLLIN}};
		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			init_fail("poll", errno);
		if (pf[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) < 0) {
			}
		}
		reap();
		if (!(pf[1].revents & (POLLIN | POLLHUP)))
			continue;
		/* Whole records come at once: read every one the socket holds. */
		do {
			struct op op;
			errno = 0;
			if (init_read_op(plan, &op) < 0) {
				if (plan->why)
					init_fail("decode plan", errno);
				/* The supervisor is done, or gone: so is the session. */
				kill(-1, SIGKILL);
				while (wait4(-1, NULL, 0, NULL) > 0 || errno == EINTR)
					;
				return 0;
			}
			if (op.type == ISOLATE_OP_SIGNAL) {
				signal_command(op.ints[0], (int)op.ints[1]);
				free_op(&op);
				continue;
			}
			if (keep_op(&op) < 0)
				init_fail("read plan", ENOMEM);
			if (init_command_op(&op, plan))
				start_command(oldmask, plan);
		} while (plan->pos < plan->len);
	}
}

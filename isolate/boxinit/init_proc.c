/*
 * The command part of the plan and the program's start: PID 1 records
 * what to run and how (arguments, environment, credentials, limits,
 * cgroup, syscall filter), then clones the program's process, which joins
 * the cgroup, sets its limits, drops to the box user, loads the filter and
 * executes the program. In a box built ahead that process may already
 * wait, filter loaded (a prepared process, below).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "init.h"

struct program init_prog = {.notify_sock = -1, .cgroup_dir = -1, .stdio = {-1, -1, -1}};
#define prog init_prog

/* received returns the descriptor the plan names by index i, or fails. */
static int received(struct op *op, struct plan_reader *r, uint64_t i) {
	if (i >= r->nfds)
		init_fail_op(op, NULL, EBADF); /* not sent with the command part */
	return r->fds[i];
}

/* init_command_op records one operation of the command part; 1 at END. */
int init_command_op(struct op *op, struct plan_reader *r) {
	uint64_t *i = op->ints;
	char **s = op->strs;
	switch (op->type) {
	case ISOLATE_OP_ARGV:
		prog.argv = s;
		break;
	case ISOLATE_OP_ENV:
		prog.envp = s;
		break;
	case ISOLATE_OP_DIR:
		prog.dir = s[0];
		break;
	case ISOLATE_OP_CRED:
		prog.uid = i[0], prog.gid = i[1];
		break;
	case ISOLATE_OP_RLIMIT:
		if (i[0] >= RLIM_NLIMITS)
			init_fail_op(op, NULL, EINVAL);
		prog.rlimits[i[0]] = i[1];
		prog.has_rlimit[i[0]] = 1;
		break;
	case ISOLATE_OP_CGROUP_TASKS:
		if (init_add_fd(&prog.cgroup_fds, &prog.ncgroup, &prog.capcgroup, received(op, r, i[0])) < 0)
			init_fail_op(op, NULL, errno);
		break;
	case ISOLATE_OP_CGROUP_FORK:
		prog.cgroup_dir = received(op, r, i[0]);
		break;
	case ISOLATE_OP_SECCOMP:
		if (op->len[0] % sizeof(struct sock_filter) || op->len[0] / sizeof(struct sock_filter) > BPF_MAXINSNS)
			init_fail_op(op, NULL, EINVAL);
		prog.notify_sock = (int)i[0];
		prog.filter = s[0];
		prog.filter_len = op->len[0];
		break;
	case ISOLATE_OP_STDIO:
		for (int k = 0; k < 3; k++)
			prog.stdio[k] = (int64_t)i[k] < 0 ? -1 : received(op, r, i[k]);
		break;
	case ISOLATE_OP_STDERR_TO_STDOUT:
		prog.stderr_to_stdout = 1;
		break;
	case ISOLATE_OP_HOLD:
		prog.hold = 1;
		break;
	case ISOLATE_OP_TELL_START:
		prog.tell_start = 1;
		break;
	case ISOLATE_OP_COMMAND_ID:
		prog.id = i[0];
		break;
	case ISOLATE_OP_HAND_OVER:
		prog.hand_over = s;
		prog.hand_back = i[0] != 0;
		break;
	case ISOLATE_OP_END:
		return 1;
	default:
		init_fail_misplaced(op, "command");
	}
	return 0;
}

/* ---- the program ---------------------------------------------------- */

/* send_fd passes fd to the supervisor over a unix socket. */
static int send_fd(int sock, int fd) {
	char byte = 'L';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) < 0 ? -1 : 0;
}

/* The steps of starting the program, for the "exited" message of a
 * program that could not be started. */
enum { CS_CGROUP = 1, CS_RLIMIT, CS_SESSION, CS_STDIO, CS_CHDIR, CS_CRED, CS_NNP, CS_SECCOMP, CS_EXEC, CS_COUNT };
static const char *child_steps[CS_COUNT] = {"", "join cgroup", "set resource limits", "create session",
                                            "set up standard streams", "enter working directory",
                                            "switch to the box user", "set no_new_privs", "load seccomp filter",
                                            "execve"};

/* child_fail tells the parent which step of starting the program failed. */
static void child_fail(int pipe_fd, int step, int err) {
	int msg[2] = {step, err};
	if (write(pipe_fd, msg, sizeof msg) < 0) {
	}
	_exit(127);
}

/* exec_path runs file like execvp, but looks it up in the program's PATH,
 * not init's. */
static void exec_path(const char *file) {
	if (strchr(file, '/')) {
		execve(file, prog.argv, prog.envp);
		return;
	}
	const char *path = "/usr/local/bin:/usr/bin:/bin";
	for (char **e = prog.envp; e && *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	int err = ENOENT;
	char buf[4096];
	while (*path) {
		const char *end = strchr(path, ':');
		size_t n = end ? (size_t)(end - path) : strlen(path);
		if (n + strlen(file) + 2 < sizeof buf) {
			memcpy(buf, path, n);
			buf[n] = '/';
			strcpy(buf + n + 1, file);
			execve(buf, prog.argv, prog.envp);
			if (errno == EACCES)
				err = EACCES;
		}
		path += n;
		if (*path == ':')
			path++;
	}
	errno = err;
}

#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif

/* What the program's process needs before it runs start_child. */
struct child_start {
	int pipe_fd;
	const sigset_t *oldmask;
	int sock; /* a prepared process's end of its socket (below) */
};

static void start_child(int pipe_fd, const sigset_t *oldmask);

static void child_entry(void *arg) {
	struct child_start *c = arg;
	start_child(c->pipe_fd, c->oldmask);
}

/* init_clone_run starts a process that runs fn(arg) and never returns.
 * With clone3 (Linux 5.3) on x86-64 it shares this process's memory
 * (CLONE_VM) and runs on the given stack: the kernel copies no page
 * tables, and neither process takes copy-on-write faults afterwards,
 * which cost most where a page fault is dear (a guest without
 * hardware-assisted paging). The new process starts on its own stack, so
 * it may use nothing of this frame: the assembly calls fn at once. Elsewhere,
 * and before 5.3, the child gets a copy of the address space, as fork
 * makes. */
long init_clone_run(struct clone3_args *args, char *stack, size_t size, void (*fn)(void *), void *arg) {
	long ret;
#if defined(__x86_64__)
	register void (*entry)(void *) __asm__("r12") = fn;
	register void *entry_arg __asm__("r13") = arg;
	struct clone3_args shared = *args;
	shared.flags |= CLONE_VM;
	shared.stack = (uint64_t)(uintptr_t)stack;
	shared.stack_size = size;
	__asm__ volatile("syscall\n\t"
	                 "test %%rax, %%rax\n\t"
	                 "jnz 1f\n\t"
	                 "xor %%ebp, %%ebp\n\t"
	                 "mov %%r13, %%rdi\n\t"
	                 "call *%%r12\n\t"
	                 "ud2\n"
	                 "1:"
	                 : "=a"(ret)
	                 : "a"((long)SYS_clone3), "D"(&shared), "S"(sizeof shared), "r"(entry), "r"(entry_arg)
	                 : "rcx", "r11", "memory");
	if (ret < 0)
		errno = -ret, ret = -1;
#else
	(void)stack, (void)size;
	ret = syscall(SYS_clone3, args, sizeof *args);
	if (ret == 0)
		fn(arg);
#endif
	if (ret >= 0 || errno != ENOSYS)
		return ret;
	/* Before 5.3: the flags clone3 alone takes (CLONE_INTO_CGROUP) are
	 * the caller's to do without. */
	if (args->flags >> 32)
		return errno = EINVAL, -1;
	ret = syscall(SYS_clone, args->flags | args->exit_signal, NULL, NULL, NULL, NULL);
	if (ret == 0)
		fn(arg);
	return ret;
}

int init_untrace(pid_t pid, int ws) {
	if (!WIFSTOPPED(ws))
		return 0;
	int sig = WSTOPSIG(ws) & 0x7f;
	if (sig == SIGTRAP) {
		/* The SIGTRAP of a traced execve is the kernel's own (SI_USER,
		 * sent by the process to itself); a breakpoint's or one the
		 * program raised is passed on. */
		siginfo_t si;
		if (syscall(SYS_ptrace, PTRACE_GETSIGINFO, pid, 0, &si) == 0 && si.si_code == SI_USER && si.si_pid == pid)
			sig = 0;
	}
	if (syscall(SYS_ptrace, PTRACE_DETACH, pid, 0, (long)sig) < 0)
		kill(pid, SIGKILL); /* never left stopped: its run would hang */
	return 1;
}

/* The stack of the program's process until its execve. */
static char child_stack[64 << 10] __attribute__((aligned(16)));

/* join_by_procs_file has the program's process write itself into the v2
 * cgroup's cgroup.procs, as into v1's tasks files, when it cannot be born
 * there: 0, or -1 with errno. */
static int join_by_procs_file(void) {
	int fd = openat(prog.cgroup_dir, "cgroup.procs", O_WRONLY | O_CLOEXEC);
	return fd < 0 || init_add_fd(&prog.cgroup_fds, &prog.ncgroup, &prog.capcgroup, fd) < 0 ? -1 : 0;
}

/* spawn_program starts the program's process, which runs start_child. On
 * cgroup v2 it is born in the box's cgroup (CLONE_INTO_CGROUP: no
 * migration, no thread-group lock); on v1 it writes itself into each tasks
 * file (start_child), as it does into cgroup.procs on kernels without
 * CLONE_INTO_CGROUP (before 5.7). */
static pid_t spawn_program(struct child_start *c) {
	/* PID 1 sleeps until the program's execve (CLONE_VFORK): they share
	 * memory until then, as with posix_spawn. */
	struct clone3_args args = {.flags = CLONE_VFORK, .exit_signal = SIGCHLD};
	if (prog.cgroup_dir >= 0) {
		args.flags |= CLONE_INTO_CGROUP;
		args.cgroup = (uint64_t)prog.cgroup_dir;
	}
	long pid = init_clone_run(&args, child_stack, sizeof child_stack, child_entry, c);
	if (pid >= 0 || prog.cgroup_dir < 0 || (errno != EINVAL && errno != E2BIG))
		return pid;
	if (join_by_procs_file() < 0)
		return -1;
	args.flags &= ~CLONE_INTO_CGROUP;
	return init_clone_run(&args, child_stack, sizeof child_stack, child_entry, c);
}

/* The descriptors the program's process starts from: the command's
 * streams (-1: init's own) and cgroup files, as numbered in its own
 * descriptor table. */
struct start_fds {
	int stdio[3];
	const int *cgroup;
	size_t ncgroup;
};

/* load_filter loads the run's syscall filter, with a listener when the
 * supervisor records what it refuses: the listener's descriptor, else -1. */
static int load_filter(int pipe_fd, const char *filter, uint32_t len, int listen) {
	struct sock_fprog fp = {.len = len / 8, .filter = (struct sock_filter *)filter};
	/* With a listener, a refused call the supervisor has received waits
	 * killably (Linux 5.19): a signal arriving as the answer goes out would
	 * otherwise restart the call, notified and counted a second time
	 * (seccomp.Install says the same). */
	unsigned long flags = listen ? SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV : 0;
	int fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fp);
	if (fd < 0 && errno == EINVAL && listen)
		fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &fp);
	if (fd < 0)
		child_fail(pipe_fd, CS_SECCOMP, errno);
	return listen ? fd : -1;
}

/* start_before_command takes the steps of the program's start that need
 * nothing of the command. */
static void start_before_command(int pipe_fd, const sigset_t *oldmask) {
	sigprocmask(SIG_SETMASK, oldmask, NULL);
	/* No core dumps, whatever the caller's limit: a crash must not hand
	 * the program's memory to the host's core_pattern handler. */
	struct rlimit nocore = {0, 0};
	if (syscall(SYS_prlimit64, 0, RLIMIT_CORE, &nocore, NULL) < 0)
		child_fail(pipe_fd, CS_RLIMIT, errno);
	if (setsid() < 0)
		child_fail(pipe_fd, CS_SESSION, errno);
}

/* start_command runs in the program's process and makes it the program,
 * from the command's descriptors on. loaded: the filter is loaded already
 * (a prepared process), listener being its listener to hand over (-1:
 * none). It may share PID 1's memory, so it changes nothing there but
 * errno: plain system calls, no C library state. */
static void start_command(int pipe_fd, const struct start_fds *f, int loaded, int listener) {
	/* Into the box's cgroups before the program's first instruction; init
	 * itself stays out, so nothing of the sandbox is charged to the box. */
	for (size_t i = 0; i < f->ncgroup; i++)
		if (write(f->cgroup[i], "0", 1) != 1)
			child_fail(pipe_fd, CS_CGROUP, errno);
	for (int res = 0; res < RLIM_NLIMITS; res++) {
		if (!prog.has_rlimit[res])
			continue;
		struct rlimit rl = {prog.rlimits[res], prog.rlimits[res]};
		/* RLIMIT_CPU is a CPU limit itself (a session command's, or one
		 * without a cgroup): SIGXCPU at it tells the supervisor so,
		 * SIGKILL a second later ends a program that ignores it. The
		 * kernel counts it in scheduler ticks, which may run ahead of
		 * the exact CPU time the report gives: the signal, not the
		 * time, says which limit ended the program. */
		if (res == RLIMIT_CPU)
			rl.rlim_max++;
		if (syscall(SYS_prlimit64, 0, res, &rl, NULL) < 0)
			child_fail(pipe_fd, CS_RLIMIT, errno);
	}
	for (int k = 0; k < 3; k++)
		if (f->stdio[k] >= 0 && dup2(f->stdio[k], k) < 0)
			child_fail(pipe_fd, CS_STDIO, errno);
	if (prog.stderr_to_stdout && dup2(1, 2) < 0)
		child_fail(pipe_fd, CS_STDIO, errno);
	if (chdir(prog.dir ? prog.dir : "/box") < 0)
		child_fail(pipe_fd, CS_CHDIR, errno);
	/* The bounding set is already empty: PID 1 emptied its own
	 * (init_drop_bounding_set). */
	/* (The C library's setresuid and friends would apply the change to
	 * every thread of a process through its own shared state.) */
	if ((!init_groups_kept && syscall(SYS_setgroups, 0, NULL) < 0) ||
	    syscall(SYS_setresgid, prog.gid, prog.gid, prog.gid) < 0 ||
	    syscall(SYS_setresuid, prog.uid, prog.uid, prog.uid) < 0)
		child_fail(pipe_fd, CS_CRED, errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(pipe_fd, CS_NNP, errno);
	/* Everything beyond 0, 1 and 2 closes at exec (the error pipe too). */
	syscall(SYS_close_range, 3, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */);
	if (!loaded && prog.filter)
		listener = load_filter(pipe_fd, prog.filter, prog.filter_len, prog.notify_sock >= 0);
	if (listener >= 0) {
		if (send_fd(prog.notify_sock, listener) < 0)
			child_fail(pipe_fd, CS_SECCOMP, errno);
		close(listener);
	}
	exec_path(prog.argv[0]);
	child_fail(pipe_fd, CS_EXEC, errno);
}

/* start_child runs in a program's process started for its command. */
static void start_child(int pipe_fd, const sigset_t *oldmask) {
	start_before_command(pipe_fd, oldmask);
	struct start_fds f = {{prog.stdio[0], prog.stdio[1], prog.stdio[2]}, prog.cgroup_fds, prog.ncgroup};
	start_command(pipe_fd, &f, 0, -1);
}

/* ---- a program's process prepared with the box ---------------------- */

/* A pool's box (PREPARE) starts its program's process as soon as it is
 * built: the process does what needs nothing of the command, loads the
 * filter the box's commands normally get (the most costly step), and waits
 * for the command. A command with that filter then only hands it its
 * descriptors, through a socket (the process has its own descriptor
 * table, copied when the box was built); one with another filter gets a
 * process of its own, as every run without a pool does. */
#define PREPARED_MAX_FDS 16
static struct {
	char *filter;
	uint32_t filter_len;
	int listen;      /* loaded with a listener */
	pid_t pid;       /* 0: none waits */
	int sock;        /* init's end of the socket the command's descriptors go through */
	int errpipe;     /* read end of its error pipe */
} prepared = {.sock = -1, .errpipe = -1};

/* discard_prepared ends a waiting process the command cannot use. */
static void discard_prepared(void) {
	if (prepared.pid > 0) {
		kill(prepared.pid, SIGKILL);
		while (waitpid(prepared.pid, NULL, 0) < 0 && errno == EINTR)
			;
		prepared.pid = 0;
	}
	if (prepared.sock >= 0)
		close(prepared.sock), close(prepared.errpipe);
	prepared.sock = prepared.errpipe = -1;
}

/* (The record's bytes are the plan reader's, which the command part may
 * move: the filter is copied.) */
void init_prepare_filter(const struct op *op) {
	uint32_t len = op->len[0];
	if (len % sizeof(struct sock_filter) || len / sizeof(struct sock_filter) > BPF_MAXINSNS)
		init_fail_op(op, NULL, EINVAL);
	init_free(prepared.filter);
	if (!(prepared.filter = init_alloc(len)))
		init_fail_op(op, NULL, ENOMEM);
	memcpy(prepared.filter, op->strs[0], len);
	prepared.filter_len = len;
	prepared.listen = op->ints[0] != 0;
}

/* What the prepared process tells PID 1 once it waits (or failed). */
struct prepared_status {
	int step, err;
};

/* touch_stack writes to the stack below its caller's frame: the command's
 * steps reach deeper than the preparation's, and this maps those pages
 * while the process waits rather than once the command came (on a VM a
 * page's first touch costs 20-60 us). */
static __attribute__((noinline)) void touch_stack(void) {
	volatile char below[8 << 10];
	for (size_t i = 0; i < sizeof below; i += 4096)
		below[i] = 0;
	below[sizeof below - 1] = 0;
}

static void prepared_entry(void *arg) {
	const struct child_start *start = arg;
	int pipe_fd = start->pipe_fd, sock = start->sock;
	struct prepared_status st = {0, 0};
	start_before_command(pipe_fd, start->oldmask);
	int listener = load_filter(pipe_fd, prepared.filter, prepared.filter_len, prepared.listen);
	touch_stack();
	if (write(sock, &st, sizeof st) != sizeof st)
		_exit(127);
	/* The command: which of the streams it brings, then its descriptors. */
	int have[4];
	union {
		char buf[CMSG_SPACE(PREPARED_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {.iov_base = have, .iov_len = sizeof have};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	ssize_t n;
	while ((n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (n != sizeof have)
		_exit(127); /* PID 1 gave up on it */
	int fds[PREPARED_MAX_FDS];
	size_t nfds = 0;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
		nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		memcpy(fds, CMSG_DATA(c), nfds * sizeof(int));
	}
	struct start_fds f = {{-1, -1, -1}, NULL, 0};
	size_t next = 0;
	for (int k = 0; k < 3; k++)
		if (have[k] && next < nfds)
			f.stdio[k] = fds[next++];
	f.cgroup = fds + next;
	f.ncgroup = nfds - next;
	if ((size_t)have[3] != f.ncgroup)
		child_fail(pipe_fd, CS_STDIO, EBADF);
	start_command(pipe_fd, &f, 1, listener);
}

void init_prepare_program(const sigset_t *oldmask) {
#if defined(__x86_64__)
	/* Only with clone3, where init_clone_run shares PID 1's memory: the
	 * process reads its command there. (clone3 without arguments fails
	 * with EINVAL where it exists.) */
	if (!prepared.filter || (syscall(SYS_clone3, NULL, 0) < 0 && errno == ENOSYS))
		return;
#else
	(void)oldmask;
	return;
#endif
	int sv[2], errpipe[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		init_fail("prepare the program's process: socketpair", errno);
	if (pipe2(errpipe, O_CLOEXEC) < 0)
		init_fail("prepare the program's process: pipe", errno);
	prepared.sock = sv[0], prepared.errpipe = errpipe[0];
	/* (cs lives until the process said it waits, past its last use.) */
	struct child_start cs = {.pipe_fd = errpipe[1], .oldmask = oldmask, .sock = sv[1]};
	/* Not CLONE_VFORK: PID 1 goes on while the process waits. It shares
	 * PID 1's memory (init_clone_run) but runs on its own stack, and
	 * touches nothing of PID 1's but errno, only while PID 1 waits for
	 * it (below, and in init_start_program). */
	struct clone3_args args = {.exit_signal = SIGCHLD};
	long pid = init_clone_run(&args, child_stack, sizeof child_stack, prepared_entry, &cs);
	close(sv[1]);
	close(errpipe[1]);
	struct prepared_status st;
	ssize_t n;
	if (pid < 0)
		init_fail("prepare the program's process: clone", errno);
	prepared.pid = pid;
	while ((n = read(sv[0], &st, sizeof st)) < 0 && errno == EINTR)
		;
	if (n != sizeof st)
		/* It failed: the command gets a process of its own, which
		 * reports the failure as usual. */
		discard_prepared();
}

/* prepared_fits tells whether the waiting process has the command's
 * filter. */
static int prepared_fits(void) {
	return prepared.pid > 0 && prog.filter && prog.filter_len == prepared.filter_len &&
	       memcmp(prog.filter, prepared.filter, prepared.filter_len) == 0 &&
	       (prog.notify_sock >= 0) == prepared.listen;
}

/* start_prepared hands the command's descriptors to the waiting process:
 * it goes on to the program. Its error pipe's read end, or -1. */
static int start_prepared(void) {
	/* v2: it was born before the command. */
	if (prog.cgroup_dir >= 0 && join_by_procs_file() < 0)
		return -1;
	int fds[PREPARED_MAX_FDS], have[4] = {0, 0, 0, (int)prog.ncgroup};
	size_t n = 0;
	for (int k = 0; k < 3; k++)
		if (prog.stdio[k] >= 0)
			have[k] = 1, fds[n++] = prog.stdio[k];
	if (n + prog.ncgroup > PREPARED_MAX_FDS)
		return -1;
	for (size_t i = 0; i < prog.ncgroup; i++)
		fds[n++] = prog.cgroup_fds[i];
	union {
		char buf[CMSG_SPACE(PREPARED_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {.iov_base = have, .iov_len = sizeof have};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	if (n > 0) {
		msg.msg_control = u.buf;
		msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(n * sizeof(int));
		memcpy(CMSG_DATA(c), fds, n * sizeof(int));
	}
	if (sendmsg(prepared.sock, &msg, MSG_NOSIGNAL) != sizeof have)
		return -1;
	close(prepared.sock);
	prepared.sock = -1;
	return prepared.errpipe;
}

/* init_drop_bounding_set empties PID 1's capability bounding set once the
 * box is built, so that the program's process inherits it empty rather
 * than making 41 prctl calls on its way to the program. The set only caps
 * what an execve may grant: PID 1 keeps its own capabilities, and never
 * executes anything. */
void init_drop_bounding_set(void) {
	/* Capabilities are numbered without gaps: EINVAL is past the last. */
	for (int c = 0; c <= 63; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break;
			init_fail("drop capabilities", errno);
		}
}

pid_t init_start_program(const void *oldmask, const char **start_step, int *start_err) {
	*start_step = NULL;
	pid_t pid;
	int errfd = prepared_fits() ? start_prepared() : -1;
	if (errfd >= 0) {
		pid = prepared.pid;
	} else {
		discard_prepared();
		int errpipe[2];
		if (pipe2(errpipe, O_CLOEXEC) < 0)
			init_fail("create pipe", errno);
		/* (The pipe's read end is close-on-exec: the program never holds it.) */
		struct child_start cs = {.pipe_fd = errpipe[1], .oldmask = oldmask, .sock = -1};
		pid = spawn_program(&cs);
		if (pid < 0)
			init_fail("start the program", errno);
		close(errpipe[1]);
		errfd = errpipe[0];
	}
	/* The program has its streams: PID 1 holds no copy, so that a
	 * captured stream ends when the box's processes are gone. */
	for (int k = 0; k < 3; k++)
		if (prog.stdio[k] >= 0) {
			int fd = prog.stdio[k];
			for (int j = k; j < 3; j++)
				if (prog.stdio[j] == fd)
					prog.stdio[j] = -1;
			close(fd);
		}
	int msg[2];
	ssize_t n;
	while ((n = read(errfd, msg, sizeof msg)) < 0 && errno == EINTR)
		;
	close(errfd);
	if (prog.notify_sock >= 0)
		close(prog.notify_sock);
	if (n == sizeof msg) {
		*start_step = child_steps[msg[0] > 0 && msg[0] < CS_COUNT ? msg[0] : CS_EXEC];
		*start_err = msg[1];
	}
	/* The program's process, sharing PID 1's memory until its execve,
	 * left it not dumpable by switching to the box user, another uid than
	 * PID 1's: so its supervisor (PID 1's uid on the host: root, or the
	 * user of a rootless box) could no longer reach the box through
	 * /proc/PID/root to copy files, without ptrace rights the service gives
	 * up. The program, another uid without capabilities, gains nothing
	 * from it. (Where the program keeps PID 1's uid, rootless with its
	 * groups kept, PID 1 stays out of its reach.) */
	if (!init_groups_kept)
		prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	return pid;
}

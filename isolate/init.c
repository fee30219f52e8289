/*
 * The box's init: PID 1 of the box's user, PID, mount, network, IPC and
 * UTS namespaces.
 *
 * It is this same binary, re-executed by the supervisor with InitArg as
 * argv[1]. It runs from an ELF constructor, before the Go runtime starts,
 * and never returns to Go: a box pays for no Go start-up, and the program
 * is forked from a process a few hundred kilobytes large (its pre-exec
 * footprint counts in the program's ru_maxrss).
 *
 * The supervisor sends the plan on fd 3, a stream socket (see protocol.go):
 * records of length-prefixed fields, each an operation to carry out
 * (mounts and files of the box's file system, host name, loopback...) or a
 * setting of the program; the cgroup files come last, as SCM_RIGHTS. PID 1
 * carries the records out as they arrive, then forks the program, reaps
 * the box and reports on fd 4, one JSON line per message. Any failure is
 * reported with the step that failed and its errno, never guessed at.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <grp.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#define INIT_ARG "__isolate_init__"
#define FD_CONTROL 3
#define FD_STATUS 4
#define CTL_GO 'g'
#define CTL_KILL 'k'

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

struct isolate_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

/* One record of the plan: n fields, each with its length (fields may hold
 * NUL bytes: file contents, BPF). Each field is also NUL-terminated. */
struct rec {
	uint32_t n;
	char **f;
	uint32_t *len;
};

/* The program and how to start it. */
static struct {
	char **argv, **envp;
	const char *dir;
	uid_t uid;
	gid_t gid;
	int nrlimits;
	struct { int res; rlim_t val; } rlimits[16];
	int ncgroup;
	int cgroup_fds[8]; /* v1: the tasks files the program writes itself into */
	int cgroup_dir;    /* v2: the cgroup the program is forked into, or -1 */
	const char *filter;
	uint32_t filter_len;
	int notify_sock; /* -1: no listener wanted */
	int stderr_to_stdout;
	int wait_for_go;
	int hold; /* keep the box after the program until the supervisor is done (--copy-out) */
} prog = {.notify_sock = -1, .cgroup_dir = -1};

static int64_t now_ns(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* PID 1's pid in the host's PID namespace: the supervisor reaches the
 * box's root through /proc/PID/root (--copy-in, --copy-out). */
static int box_host_pid;

/* Stage timers, sent with "started". */
static struct { const char *name; int64_t ns; } stages[8];
static int nstages;
static int64_t stage_last;
static void mark(const char *name) {
	int64_t t = now_ns();
	if (nstages < 8) {
		stages[nstages].name = name;
		stages[nstages].ns = t - stage_last;
		nstages++;
	}
	stage_last = t;
}

/* ---- reporting ---------------------------------------------------- */

static char out[8192];
static size_t outlen;

static void put(const char *s) {
	size_t n = strlen(s);
	if (outlen + n < sizeof out) {
		memcpy(out + outlen, s, n);
		outlen += n;
	}
}

static void put_json_str(const char *s) {
	char buf[8];
	put("\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			buf[0] = '\\', buf[1] = c, buf[2] = 0;
			put(buf);
		} else if (c < 0x20) {
			snprintf(buf, sizeof buf, "\\u%04x", c);
			put(buf);
		} else {
			buf[0] = c, buf[1] = 0;
			put(buf);
		}
	}
	put("\"");
}

static void put_num(const char *key, long long v) {
	char buf[64];
	snprintf(buf, sizeof buf, ",\"%s\":%lld", key, v);
	put(buf);
}

static void flush(void) {
	put("\n");
	size_t off = 0;
	while (off < outlen) {
		ssize_t n = write(FD_STATUS, out + off, outlen - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += n;
	}
	outlen = 0;
}

/* fail reports a failed step with its errno and ends init. */
static void fail(const char *step, int err) {
	put("{\"type\":\"error\",\"step\":");
	put_json_str(step);
	put(",\"err\":");
	put_json_str(strerror(err));
	put_num("errno", err);
	put("}");
	flush();
	_exit(1);
}

/* ---- reading the plan ---------------------------------------------- */

/* Descriptors that came with the plan (the cgroup files, see
 * sendWithFiles in supervisor.go); the plan names them by index. */
static int received[8];
static int nreceived;

/* The plan arrives in large reads: the supervisor sends nothing after it
 * until init answers, so reading ahead takes nothing that is not plan. */
static char *planbuf;
static size_t plan_cap, plan_len, plan_pos;

/* fill_plan receives more of the plan from the control socket, taking any
 * descriptors attached to it. */
static int fill_plan(void) {
	if (plan_pos == plan_len)
		plan_pos = plan_len = 0;
	if (plan_len == plan_cap) {
		size_t cap = plan_cap ? plan_cap * 2 : 256 << 10;
		char *b = realloc(planbuf, cap);
		if (!b)
			return -1;
		planbuf = b, plan_cap = cap;
	}
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof received)];
	} cm;
	struct iovec iov = {.iov_base = planbuf + plan_len, .iov_len = plan_cap - plan_len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
	ssize_t r;
	while ((r = recvmsg(FD_CONTROL, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (r <= 0)
		return -1;
	if (mh.msg_flags & MSG_CTRUNC)
		return errno = EMFILE, -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k && nreceived < 8; i++)
			memcpy(&received[nreceived++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	plan_len += r;
	return 0;
}

/* read_plan takes the next n bytes of the plan. */
static int read_plan(void *buf, size_t n) {
	char *p = buf;
	while (n > 0) {
		if (plan_pos == plan_len && fill_plan() < 0)
			return -1;
		size_t k = plan_len - plan_pos < n ? plan_len - plan_pos : n;
		memcpy(p, planbuf + plan_pos, k);
		plan_pos += k, p += k, n -= k;
	}
	return 0;
}

static int read_rec(struct rec *r) {
	if (read_plan(&r->n, 4) < 0 || r->n == 0 || r->n > 1 << 16)
		return -1;
	r->f = calloc(r->n, sizeof *r->f);
	r->len = calloc(r->n, sizeof *r->len);
	if (!r->f || !r->len)
		return -1;
	for (uint32_t i = 0; i < r->n; i++) {
		if (read_plan(&r->len[i], 4) < 0 || r->len[i] > 64u << 20)
			return -1;
		r->f[i] = malloc(r->len[i] + 1);
		if (!r->f[i] || read_plan(r->f[i], r->len[i]) < 0)
			return -1;
		r->f[i][r->len[i]] = 0;
	}
	return 0;
}

/* ---- file system and namespace operations -------------------------- */

/* mkdir_p creates path and any missing parents. The parents nearly always
 * exist: try the directory itself first. */
static int mkdir_p(char *path, mode_t mode) {
	if (mkdir(path, mode) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return -1;
	char *slash = strrchr(path, '/');
	if (!slash || slash == path)
		return -1;
	*slash = 0;
	int rc = mkdir_p(path, 0755);
	*slash = '/';
	if (rc < 0)
		return -1;
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

static int write_file(const char *path, const char *data, size_t n, mode_t mode) {
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -1;
	while (n > 0) {
		ssize_t w = write(fd, data, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			close(fd);
			return -1;
		}
		data += w;
		n -= w;
	}
	return close(fd);
}

static int loopback_up(void) {
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	int rc = ioctl(s, SIOCGIFFLAGS, &ifr);
	if (rc == 0) {
		ifr.ifr_flags |= IFF_UP;
		rc = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	int e = errno;
	close(s);
	errno = e;
	return rc;
}

#define OP(name) (strcmp(r->f[1], name) == 0)
#define ARG(i) (r->f[2 + (i)])
#define NARGS (r->n - 2)

/* do_op carries out one record of the plan; a record's field 0 names the
 * step (for errors), field 1 the operation. */
static void do_op(struct rec *r) {
	const char *step = r->f[0];
	int rc = 0;
	if (r->n < 2)
		fail("decode plan", EINVAL);
	if (OP("private")) {
		rc = mount("", "/", NULL, MS_REC | MS_PRIVATE, NULL);
	} else if (OP("mount") && NARGS == 5) {
		rc = mount(ARG(0), ARG(1), ARG(2)[0] ? ARG(2) : NULL, strtoul(ARG(3), NULL, 10), ARG(4)[0] ? ARG(4) : NULL);
	} else if (OP("setattr") && NARGS == 3) {
		struct isolate_mount_attr a = {.attr_set = strtoull(ARG(1), NULL, 10)};
		rc = syscall(SYS_mount_setattr, AT_FDCWD, ARG(0), ARG(2)[0] == '1' ? AT_RECURSIVE : 0, &a, sizeof a);
	} else if (OP("mkdir") && NARGS == 1) {
		rc = mkdir_p(ARG(0), 0755);
	} else if (OP("touch") && NARGS == 1) {
		char *slash = strrchr(ARG(0), '/');
		if (slash && slash != ARG(0)) {
			*slash = 0;
			rc = mkdir_p(ARG(0), 0755);
			*slash = '/';
		}
		if (rc == 0) {
			int fd = open(ARG(0), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
			rc = fd < 0 ? -1 : close(fd);
		}
	} else if (OP("symlink") && NARGS == 2) {
		rc = symlink(ARG(0), ARG(1));
	} else if (OP("write") && NARGS == 3) {
		rc = write_file(ARG(0), ARG(2), r->len[4], strtoul(ARG(1), NULL, 10));
	} else if (OP("remount-ro") && NARGS == 1) {
		rc = mount("", ARG(0), NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
	} else if (OP("pivot") && NARGS == 1) {
		/* pivot_root(".", ".") stacks the old root under the new one;
		 * detaching "." then drops it without a put_old directory. */
		if ((rc = chdir(ARG(0))) == 0 && (rc = syscall(SYS_pivot_root, ".", ".")) == 0 &&
		    (rc = umount2(".", MNT_DETACH)) == 0)
			rc = chdir("/");
	} else if (OP("hostname") && NARGS == 1) {
		rc = sethostname(ARG(0), strlen(ARG(0)));
	} else if (OP("loopback")) {
		rc = loopback_up();
	} else if (OP("sysctl") && NARGS == 2) {
		int fd = open(ARG(0), O_WRONLY | O_CLOEXEC);
		rc = fd < 0 ? -1 : write(fd, ARG(1), strlen(ARG(1))) < 0 ? -1 : close(fd);
	} else if (OP("argv")) {
		prog.argv = calloc(NARGS + 1, sizeof(char *));
		memcpy(prog.argv, &ARG(0), NARGS * sizeof(char *));
	} else if (OP("env")) {
		prog.envp = calloc(NARGS + 1, sizeof(char *));
		memcpy(prog.envp, &ARG(0), NARGS * sizeof(char *));
	} else if (OP("dir") && NARGS == 1) {
		prog.dir = ARG(0);
	} else if (OP("cred") && NARGS == 2) {
		prog.uid = strtoul(ARG(0), NULL, 10);
		prog.gid = strtoul(ARG(1), NULL, 10);
	} else if (OP("rlimit") && NARGS == 2 && prog.nrlimits < 16) {
		prog.rlimits[prog.nrlimits].res = atoi(ARG(0));
		prog.rlimits[prog.nrlimits].val = strtoull(ARG(1), NULL, 10);
		prog.nrlimits++;
	} else if (OP("cgroup") && NARGS == 1 && prog.ncgroup < 8) {
		int i = atoi(ARG(0));
		if (i < 0 || i >= nreceived)
			fail("decode plan: cgroup file not received", EBADF);
		prog.cgroup_fds[prog.ncgroup++] = received[i];
	} else if (OP("cgroup-fork") && NARGS == 1) {
		int i = atoi(ARG(0));
		if (i < 0 || i >= nreceived)
			fail("decode plan: cgroup not received", EBADF);
		prog.cgroup_dir = received[i];
	} else if (OP("seccomp") && NARGS == 2) {
		prog.filter = ARG(0);
		prog.filter_len = r->len[2];
		prog.notify_sock = atoi(ARG(1));
	} else if (OP("stderr-to-stdout")) {
		prog.stderr_to_stdout = 1;
	} else if (OP("wait-for-go")) {
		prog.wait_for_go = 1;
	} else if (OP("hold")) {
		prog.hold = 1;
	} else {
		fail("decode plan: unknown operation", EINVAL);
	}
	if (rc < 0)
		fail(step, errno);
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

/* child_fail tells the parent which step of starting the program failed. */
static void child_fail(int pipe_fd, int step, int err) {
	int msg[2] = {step, err};
	if (write(pipe_fd, msg, sizeof msg) < 0) {
	}
	_exit(127);
}

enum { CS_CGROUP = 1, CS_RLIMIT, CS_SESSION, CS_STDIO, CS_CHDIR, CS_CAPS, CS_CRED, CS_NNP, CS_SECCOMP, CS_EXEC };
static const char *child_steps[] = {"", "join cgroup", "set resource limits", "create session", "set up standard streams",
                                    "enter working directory", "drop capabilities", "switch to the box user",
                                    "set no_new_privs", "load seccomp filter", "execute"};

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

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif

struct clone3_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

/* What the program's process needs before it runs start_child. */
struct child_start {
	int pipe_fd;
	const sigset_t *oldmask;
};

static void start_child(int pipe_fd, const sigset_t *oldmask);

static void child_entry(void *arg) {
	struct child_start *c = arg;
	start_child(c->pipe_fd, c->oldmask);
}

/* clone_run starts a process that runs fn(arg) and never returns. With
 * clone3 (Linux 5.3) on x86-64 it shares this process's memory
 * (CLONE_VM) and runs on the given stack: the kernel copies no page
 * tables, and neither process takes copy-on-write faults afterwards. On
 * the project's VMs, where a page fault costs ~10 us, fork + exec + wait
 * of /bin/true takes 2.2 ms against 1.5 ms with vfork (scripts/
 * kernel-costs.sh faults). The new process starts on its own stack, so it
 * may use nothing of this frame: the assembly calls fn at once. Elsewhere,
 * and before 5.3, the child gets a copy of the address space, as fork
 * makes. */
static long clone_run(struct clone3_args *args, char *stack, size_t size, void (*fn)(void *), void *arg) {
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

/* The stacks of PID 1 and of the program's process until its execve. */
static char pid1_stack[256 << 10] __attribute__((aligned(16)));
static char child_stack[64 << 10] __attribute__((aligned(16)));

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
	long pid = clone_run(&args, child_stack, sizeof child_stack, child_entry, c);
	if (pid >= 0 || prog.cgroup_dir < 0 || (errno != EINVAL && errno != E2BIG))
		return pid;
	int fd = openat(prog.cgroup_dir, "cgroup.procs", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	prog.cgroup_fds[prog.ncgroup++] = fd;
	args.flags &= ~CLONE_INTO_CGROUP;
	return clone_run(&args, child_stack, sizeof child_stack, child_entry, c);
}

/* start_child runs in the program's process: it becomes the program. It
 * may share PID 1's memory (spawn_program), so it changes nothing there
 * but errno: plain system calls, no C library state. */
static void start_child(int pipe_fd, const sigset_t *oldmask) {
	sigprocmask(SIG_SETMASK, oldmask, NULL);
	/* No core dumps, whatever the caller's limit: a crash must not hand
	 * the program's memory to the host's core_pattern handler. */
	struct rlimit nocore = {0, 0};
	if (syscall(SYS_prlimit64, 0, RLIMIT_CORE, &nocore, NULL) < 0)
		child_fail(pipe_fd, CS_RLIMIT, errno);
	/* Into the box's cgroups before the program's first instruction; init
	 * itself stays out, so nothing of the sandbox is charged to the box. */
	for (int i = 0; i < prog.ncgroup; i++)
		if (write(prog.cgroup_fds[i], "0", 1) != 1)
			child_fail(pipe_fd, CS_CGROUP, errno);
	for (int i = 0; i < prog.nrlimits; i++) {
		struct rlimit rl = {prog.rlimits[i].val, prog.rlimits[i].val};
		if (syscall(SYS_prlimit64, 0, prog.rlimits[i].res, &rl, NULL) < 0)
			child_fail(pipe_fd, CS_RLIMIT, errno);
	}
	if (setsid() < 0)
		child_fail(pipe_fd, CS_SESSION, errno);
	if (prog.stderr_to_stdout && dup2(1, 2) < 0)
		child_fail(pipe_fd, CS_STDIO, errno);
	if (chdir(prog.dir ? prog.dir : "/box") < 0)
		child_fail(pipe_fd, CS_CHDIR, errno);
	/* Capabilities are numbered without gaps: EINVAL is past the last. */
	for (int c = 0; c <= 63; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break;
			child_fail(pipe_fd, CS_CAPS, errno);
		}
	/* (The C library's setresuid and friends would apply the change to
	 * every thread of a process through its own shared state.) */
	if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, prog.gid, prog.gid, prog.gid) < 0 ||
	    syscall(SYS_setresuid, prog.uid, prog.uid, prog.uid) < 0)
		child_fail(pipe_fd, CS_CRED, errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(pipe_fd, CS_NNP, errno);
	/* Everything beyond 0, 1 and 2 closes at exec (the error pipe too). */
	syscall(SYS_close_range, 3, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */);
	if (prog.filter) {
		struct sock_fprog fp = {.len = prog.filter_len / 8, .filter = (struct sock_filter *)prog.filter};
		unsigned flags = prog.notify_sock >= 0 ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
		int fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fp);
		if (fd < 0)
			child_fail(pipe_fd, CS_SECCOMP, errno);
		if (prog.notify_sock >= 0) {
			if (send_fd(prog.notify_sock, fd) < 0)
				child_fail(pipe_fd, CS_SECCOMP, errno);
			close(fd);
		}
	}
	exec_path(prog.argv[0]);
	child_fail(pipe_fd, CS_EXEC, errno);
}

static void report_exited(int ws, int64_t wall, struct rusage *ru, const char *exec_err) {
	put("{\"type\":\"exited\"");
	put_num("pid", box_host_pid);
	put_num("ws", ws);
	put_num("wall_ns", wall);
	put_num("utime_ns", (long long)ru->ru_utime.tv_sec * 1000000000 + ru->ru_utime.tv_usec * 1000);
	put_num("stime_ns", (long long)ru->ru_stime.tv_sec * 1000000000 + ru->ru_stime.tv_usec * 1000);
	put_num("maxrss_kb", ru->ru_maxrss);
	put_num("nvcsw", ru->ru_nvcsw);
	put_num("nivcsw", ru->ru_nivcsw);
	if (exec_err) {
		put(",\"exec_err\":");
		put_json_str(exec_err);
	}
	put("}");
	flush();
}

/* wait_control blocks until the supervisor closes the control socket. */
static void wait_control(void) {
	char c;
	while (read(FD_CONTROL, &c, 1) > 0 || errno == EINTR)
		;
}

/* run_box is PID 1 of the box: it carries out the plan, starts the
 * program and reaps the box. */
static int run_box(void) {
	sigset_t chld, oldmask;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &oldmask);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC);
	if (sfd < 0)
		fail("create signalfd", errno);
	/* Each step is carried out as it arrives: the supervisor sends the
	 * file system at once, and the cgroup files, made meanwhile, last. */
	static struct rec r;
	for (int first = 1;; first = 0) {
		errno = 0;
		if (read_rec(&r) < 0)
			fail("read plan", errno ? errno : EPIPE);
		if (first)
			mark("init-plan");
		if (r.n < 2)
			fail("decode plan: record without an operation", EINVAL);
		if (strcmp(r.f[1], "end") == 0)
			break;
		do_op(&r);
	}
	mark("init-setup");
	if (!prog.argv || !prog.argv[0])
		fail("decode plan: no program", EINVAL);
	if (prog.wait_for_go) {
		put("{\"type\":\"ready\"");
		put_num("pid", box_host_pid);
		put("}");
		flush();
		char c;
		if (read(FD_CONTROL, &c, 1) != 1 || c != CTL_GO)
			_exit(1);
	}

	int errpipe[2];
	if (pipe2(errpipe, O_CLOEXEC) < 0)
		fail("create pipe", errno);
	int64_t start = now_ns();
	/* (The pipe's read end is close-on-exec: the program never holds it.) */
	struct child_start cs = {.pipe_fd = errpipe[1], .oldmask = &oldmask};
	pid_t pid = spawn_program(&cs);
	if (pid < 0)
		fail("start the program", errno);
	close(errpipe[1]);
	int msg[2];
	ssize_t n;
	while ((n = read(errpipe[0], msg, sizeof msg)) < 0 && errno == EINTR)
		;
	close(errpipe[0]);
	if (prog.notify_sock >= 0)
		close(prog.notify_sock);
	struct rusage ru;
	int ws;
	if (n == sizeof msg) {
		/* It could not be started: report it as a shell would, 127. */
		wait4(pid, &ws, 0, &ru);
		char text[512];
		int step = msg[0] > 0 && msg[0] <= CS_EXEC ? msg[0] : CS_EXEC;
		if (step == CS_EXEC)
			snprintf(text, sizeof text, "%s: %s", prog.argv[0], strerror(msg[1]));
		else
			snprintf(text, sizeof text, "%s: %s", child_steps[step], strerror(msg[1]));
		report_exited(127 << 8, now_ns() - start, &ru, text);
		if (prog.hold)
			wait_control();
		return 0;
	}
	mark("init-exec");
	put("{\"type\":\"started\",\"stages\":{");
	for (int i = 0; i < nstages; i++) {
		char buf[96];
		snprintf(buf, sizeof buf, "%s\"%s\":%lld", i ? "," : "", stages[i].name, (long long)stages[i].ns);
		put(buf);
	}
	put("}");
	put_num("pid", box_host_pid);
	put("}");
	flush();

	/* Reap until the program is gone; then kill what it left and reap
	 * that too. The supervisor may ask for a kill meanwhile. */
	int64_t end = 0;
	int main_ws = 0, done = 0, ctl_open = 1;
	struct rusage main_ru;
	memset(&main_ru, 0, sizeof main_ru);
	while (!done) {
		struct pollfd pf[2] = {{.fd = sfd, .events = POLLIN}, {.fd = FD_CONTROL, .events = POLLIN}};
		if (poll(pf, ctl_open ? 2 : 1, -1) < 0 && errno != EINTR)
			fail("poll", errno);
		if (ctl_open && (pf[1].revents & (POLLIN | POLLHUP))) {
			char c;
			ssize_t k = read(FD_CONTROL, &c, 1);
			if (k <= 0) {
				/* The supervisor is gone: take the box down. */
				ctl_open = 0;
				kill(-1, SIGKILL);
			} else if (c == CTL_KILL) {
				kill(-1, SIGKILL);
			}
		}
		if (pf[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) < 0) {
			}
		}
		for (;;) {
			struct rusage r;
			int s;
			pid_t w = wait4(-1, &s, WNOHANG, &r);
			if (w <= 0)
				break;
			if (w == pid) {
				end = now_ns();
				main_ws = s;
				main_ru = r;
				done = 1;
			}
		}
	}
	/* The program is done: so is everything it left behind. */
	kill(-1, SIGKILL);
	while (wait4(-1, NULL, 0, NULL) > 0 || errno == EINTR)
		;
	if (!ctl_open)
		return 1;
	report_exited(main_ws, end - start, &main_ru, NULL);
	/* Without --copy-out nothing needs the box any more: tearing it down
	 * (the kernel drops the namespaces and mounts) overlaps the
	 * supervisor's accounting. */
	if (prog.hold)
		wait_control(); /* the supervisor copies files out meanwhile */
	return 0;
}

/* write_id_maps writes the ID maps (the text of uid_map and gid_map) of
 * process pid's user namespace. */
static int write_id_maps(pid_t pid, const char *maps) {
	static const char *files[] = {"uid_map", "gid_map"};
	size_t n = strlen(maps);
	for (int i = 0; i < 2; i++) {
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, files[i]);
		int fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			return -1;
		ssize_t w = write(fd, maps, n);
		int err = errno;
		close(fd);
		if (w != (ssize_t)n)
			return errno = w < 0 ? err : EIO, -1;
	}
	return 0;
}

/* pid1_entry is PID 1 of the box, in the new namespaces: it waits until
 * its ID maps are written (the pipe mapped brings its host pid), then
 * carries out the plan. */
static void pid1_entry(void *arg) {
	int *mapped = arg;
	mark("init-namespaces");
	/* (getppid() is 0 here, the parent being outside the new PID
	 * namespace; had the parent died already, the closed pipe and
	 * control socket take the box down.) */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		fail("set the parent-death signal", errno);
	close(mapped[1]);
	int32_t host_pid;
	if (read(mapped[0], &host_pid, sizeof host_pid) != sizeof host_pid)
		_exit(1); /* the parent failed, and said why */
	close(mapped[0]);
	box_host_pid = host_pid;
	mark("init-maps");
	_exit(run_box());
}

/* run_init starts PID 1 of the box in new namespaces, maps its user
 * namespace, and stays its parent, so that the supervisor's death
 * (PDEATHSIG on this process) takes the box down. PID 1 reads the plan
 * and carries it out.
 *
 * PID 1 is cloned straight into the namespaces, and this process stays in
 * the host's, still root there: it writes PID 1's ID maps itself (maps:
 * their text), with no round trip through the supervisor. And the
 * supervisor can start this process with vfork: Go must fully fork its
 * own address space to create a user namespace, which cost a millisecond
 * per run. */
static int run_init(unsigned long flags, const char *maps) {
	stage_last = now_ns();
	/* The box's /etc and mount points must be readable by the box user,
	 * whatever umask the caller had. */
	umask(022);
	/* Nothing the supervisor passed may reach the program by accident. */
	syscall(SYS_close_range, 3, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */);
	int mapped[2];
	if (pipe2(mapped, O_CLOEXEC) < 0)
		fail("create pipe", errno);
	/* PID 1 shares this process's memory (clone_run): it alone uses the C
	 * library's state from here on; this process only writes the maps
	 * and waits, on its own stack. */
	struct clone3_args args = {.flags = flags, .exit_signal = SIGCHLD};
	pid_t pid1 = clone_run(&args, pid1_stack, sizeof pid1_stack, pid1_entry, mapped);
	if (pid1 < 0)
		fail("create namespaces", errno);
	close(mapped[0]);
	if (write_id_maps(pid1, maps) < 0)
		fail("write the user namespace's ID maps", errno);
	int32_t host_pid = pid1;
	if (write(mapped[1], &host_pid, sizeof host_pid) != sizeof host_pid)
		fail("start the box's PID 1", errno);
	/* Hold nothing of the box's: its streams end when PID 1's do. */
	syscall(SYS_close_range, 0, ~0U, 0);
	int ws;
	while (waitpid(pid1, &ws, 0) < 0)
		if (errno != EINTR)
			return 1;
	return WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
}

void isolate_narrow_cpus(void);

#ifdef __GLIBC__
__attribute__((constructor)) static void isolate_init_entry(int argc, char **argv, char **envp) {
	(void)envp;
#else
extern char **environ;

/*
 * musl calls constructors without arguments. Nothing has touched the
 * environment yet, so environ is still where the kernel put it: right
 * after argv's terminating NULL, with argc in the word before argv[0]
 * (the ELF start-up stack). argv's entries are pointers, never a small
 * count, so the first n whose slot holds n is argc.
 */
__attribute__((constructor)) static void isolate_init_entry(void) {
	char **envp = environ;
	long argc = 0;
	while ((long)envp[-2 - argc] != argc)
		argc++;
	char **argv = envp - 1 - argc;
#endif
	if (argc >= 4 && strcmp(argv[1], INIT_ARG) == 0)
		_exit(run_init(strtoul(argv[2], NULL, 10), argv[3]));
	isolate_narrow_cpus(); /* the supervisor (or a test): see procs.c */
}

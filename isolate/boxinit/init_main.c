/*
 * The box's init: PID 1 of the box's user, PID, mount, network, IPC and
 * UTS namespaces. This file holds its entry point, the namespaces, and
 * PID 1's control loop; init.h lists the others.
 *
 * It is this same binary, re-executed by the supervisor with
 * ISOLATE_INIT_ARG as argv[1] (or these files built alone:
 * isolate/initbin). It runs from an ELF constructor, before the
 * Go runtime starts, and never returns to Go: a box pays for no Go
 * start-up, and the program is forked from a process a few hundred
 * kilobytes large (its pre-exec footprint counts in the program's
 * ru_maxrss).
 *
 * The supervisor sends the plan on fd 3, a stream socket (protocol.h):
 * typed records, first the box part (namespaces' settings, file system),
 * which PID 1 carries out as it arrives, then the command part (the
 * program and how to start it; the cgroup files come last, as
 * SCM_RIGHTS). PID 1 then forks the program, reaps the box and reports on
 * fd 4, one JSON line per message. Any failure is reported with the step
 * that failed and its errno, never guessed at.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "early.h"
#include "init.h"
#include "procs.h"

int init_box_host_pid;
int init_rootless;
int init_groups_kept;

/* early_maps_fd is an early init's ID maps pipe (isolate_start_early_init),
 * at fd ISOLATE_FD_EXTRA until read; -1 for a spawned init. */
static int early_maps_fd = -1;

/* An early init makes its namespaces on a CPU other than the supervisor's
 * (which the Go runtime boots on meanwhile); its PID 1, and so the
 * program, then take the caller's CPUs (early_cpus) back. */
static cpu_set_t early_cpus;
static int early_cpus_away;

/* read_op reads the next record of the plan, or fails. */
static void read_op(struct plan_reader *r, struct op *op) {
	errno = 0;
	if (init_read_op(r, op) == 0)
		return;
	if (r->why) {
		char step[96];
		snprintf(step, sizeof step, "decode plan: %s", r->why);
		init_fail(step, errno);
	}
	init_fail("read plan", errno ? errno : EPIPE);
}

/* wait_control blocks until the supervisor closes the control socket. */
static void wait_control(void) {
	char c;
	while (read(ISOLATE_FD_CONTROL, &c, 1) > 0 || errno == EINTR)
		;
}

/* A program's start is told the supervisor this long after its execve at
 * most, or with its end if it ends sooner: the supervisor has nothing to
 * do when it starts, and waking it then preempts the program (on one CPU:
 * 3.5 % of a handed-over /bin/true). The message carries the execve's
 * time, which the supervisor's limits count from. */
#define STARTED_DELAY_NS 10000000LL

/* hand_back gives the directories handed over back to uid 0 (the
 * caller, who copies files out and removes exec's /box), once nothing of
 * the program runs. */
static void hand_back(void) {
	if (init_prog.hand_back)
		init_hand_trees(init_prog.hand_over, 0, 0);
}

/* run_box is PID 1 of the box: it builds the box from the plan's box
 * part, takes the command part, starts the program and reaps the box. */
static int run_box(void) {
	sigset_t chld, oldmask;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &oldmask);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC);
	if (sfd < 0)
		init_fail("create signalfd", errno);
	if (early_maps_fd >= 0) {
		/* Clear of the numbers the box part's descriptors take. */
		int high = fcntl(sfd, F_DUPFD_CLOEXEC, INIT_FD_HIGH);
		if (high < 0)
			init_fail("move signalfd", errno);
		close(sfd);
		sfd = high;
	}
	/* Each step is carried out as it arrives: the supervisor sends the
	 * box part at once, and the command part (whose cgroup files are
	 * made meanwhile) after it. */
	static struct plan_reader plan = {.fd = ISOLATE_FD_CONTROL};
	struct op op;
	read_op(&plan, &op);
	init_mark(STAGE_PLAN);
	int announce = 0;
	for (;; read_op(&plan, &op)) {
		if (op.type == ISOLATE_OP_PLACE_FD) {
			if (init_place_fd(&plan, (int)op.ints[0]) < 0)
				init_fail_op(&op, NULL, errno);
		} else if (init_box_op(&op, &announce))
			break;
	}
	init_drop_bounding_set();
	init_prepare_program(&oldmask);
	if (announce) {
		/* A pool's box: built ahead, it waits for its command (on a VM a
		 * page's first touch costs 20-60 us: not while the caller waits). */
		init_arena_warm(12 << 10);
		init_put("{\"type\":\"" ISOLATE_MSG_READY "\"");
		init_put_num("pid", init_box_host_pid);
		init_put("}");
		init_flush();
	}
	if (init_session)
		return init_run_session(&oldmask, sfd, &plan);
	do
		read_op(&plan, &op);
	while (!init_command_op(&op, &plan));
	init_mark(STAGE_SETUP);
	if (!init_prog.argv || !init_prog.argv[0])
		init_fail("decode plan: no program", EINVAL);
	/* Filled by the supervisor as uid 0; the program's from now on. */
	init_hand_trees(init_prog.hand_over, init_prog.uid, init_prog.gid);

	int64_t start = init_now_ns();
	const char *start_step;
	int start_err;
	int at_once = init_prog.notify_sock >= 0 || init_prog.tell_start;
	pid_t pid = init_start_program(&oldmask, &start_step, &start_err);
	struct rusage ru;
	int ws;
	if (start_step) {
		/* It could not be started: report it as a shell would, 127. */
		wait4(pid, &ws, 0, &ru);
		hand_back();
		init_put_exited(0, 127 << 8, init_now_ns() - start, &ru, start_step, start_err);
		if (init_prog.hold)
			wait_control();
		return 0;
	}
	init_mark(STAGE_EXEC);
	int64_t exec_ns = init_now_ns();
	init_put("{\"type\":\"" ISOLATE_MSG_STARTED "\"");
	init_report_stages();
	init_put_num("pid", init_box_host_pid);
	init_put_num("exec_ns", exec_ns);
	init_put("}\n");
	/* The start is told late (STARTED_DELAY_NS), but not to a seccomp
	 * recorder, which takes its listener once it knows of it, nor when the
	 * supervisor asks (a limit too short to wait). */
	int64_t tell_start_at = exec_ns + STARTED_DELAY_NS;
	int start_told = 0;
	if (at_once) {
		init_send();
		start_told = 1;
	}

	/* Reap until the program is gone; then kill what it left and reap
	 * that too. The supervisor may ask for a kill meanwhile. */
	int64_t end = 0;
	int main_ws = 0, done = 0, ctl_open = 1;
	struct rusage main_ru;
	memset(&main_ru, 0, sizeof main_ru);
	while (!done) {
		int timeout = -1;
		if (!start_told) {
			int64_t left = tell_start_at - init_now_ns();
			timeout = left > 0 ? (int)((left + 999999) / 1000000) : 0;
		}
		struct pollfd pf[2] = {{.fd = sfd, .events = POLLIN}, {.fd = ISOLATE_FD_CONTROL, .events = POLLIN}};
		if (poll(pf, ctl_open ? 2 : 1, timeout) < 0 && errno != EINTR)
			init_fail("poll", errno);
		if (!start_told && init_now_ns() >= tell_start_at) {
			init_send();
			start_told = 1;
		}
		if (ctl_open && (pf[1].revents & (POLLIN | POLLHUP))) {
			char c;
			ssize_t k = read(ISOLATE_FD_CONTROL, &c, 1);
			if (k <= 0) {
				/* The supervisor is gone: take the box down. */
				ctl_open = 0;
				kill(-1, SIGKILL);
			} else if (c == ISOLATE_CTL_KILL) {
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
			if (init_untrace(w, s))
				continue;
			if (w == pid) {
				end = init_now_ns();
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
	/* (Its supervisor gone too: exec's /box, a directory of the caller's,
	 * must still be the caller's to remove.) */
	hand_back();
	if (!ctl_open)
		return 1;
	/* The user/system split of every process of the program, orphans
	 * that PID 1 reaped included, not only of the main process; maxrss
	 * and context switches stay the main process's. */
	struct rusage all;
	if (getrusage(RUSAGE_CHILDREN, &all) == 0) {
		main_ru.ru_utime = all.ru_utime;
		main_ru.ru_stime = all.ru_stime;
	}
	init_put_exited(0, main_ws, end - start, &main_ru, NULL, 0);
	/* Without --copy-out nothing needs the box any more: tearing it down
	 * (the kernel drops the namespaces and mounts) overlaps the
	 * supervisor's accounting. */
	if (init_prog.hold)
		wait_control(); /* the supervisor copies files out meanwhile */
	return 0;
}

/* write_id_maps writes the ID maps (the text of uid_map and gid_map) of
 * process pid's user namespace: maps for both, or, made by a user who is
 * not root (gid_maps set), maps and gid_maps, after denying setgroups,
 * as the kernel requires of an unprivileged gid_map. */
static int write_id_maps(pid_t pid, const char *maps, const char *gid_maps) {
	static const char *files[] = {"setgroups", "uid_map", "gid_map"};
	const char *text[] = {"deny", maps, gid_maps ? gid_maps : maps};
	for (int i = gid_maps ? 0 : 1; i < 3; i++) {
		char path[64];
		size_t n = strlen(text[i]);
		snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, files[i]);
		int fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			return -1;
		ssize_t w = write(fd, text[i], n);
		int err = errno;
		close(fd);
		if (w != (ssize_t)n)
			return errno = w < 0 ? err : EIO, -1;
	}
	return 0;
}

/* run_map_tool runs tool, newuidmap or newgidmap (setuid root: it checks
 * the ranges against /etc/subuid or /etc/subgid), to write the map of
 * process pid's user namespace, with the numbers of maps (the map's
 * text) as its arguments. On failure -1, errno, and what the tool said in
 * why. It runs with no environment, and its output never reaches the
 * program's streams. (posix_spawn: a vfork, which touches nothing of the
 * memory this process shares with PID 1.) */
static int run_map_tool(const char *tool, pid_t pid, const char *maps, char *why, size_t whylen) {
	char text[256], pidtext[16];
	char *argv[16] = {(char *)tool, pidtext};
	int argc = 2;
	why[0] = 0;
	if (strlen(maps) >= sizeof text)
		return errno = E2BIG, -1;
	strcpy(text, maps);
	snprintf(pidtext, sizeof pidtext, "%d", (int)pid);
	char *save = NULL;
	for (char *t = strtok_r(text, " \n", &save); t; t = strtok_r(NULL, " \n", &save)) {
		if (argc == 15)
			return errno = E2BIG, -1;
		argv[argc++] = t;
	}
	int out[2];
	if (pipe2(out, O_CLOEXEC) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_adddup2(&fa, out[1], 2);
	char *envp[] = {NULL};
	pid_t child;
	int rc = posix_spawn(&child, tool, &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	close(out[1]);
	if (rc != 0) {
		close(out[0]);
		return errno = rc, -1;
	}
	size_t n = 0;
	char rest[256];
	for (;;) {
		ssize_t k = n + 1 < whylen ? read(out[0], why + n, whylen - 1 - n) : read(out[0], rest, sizeof rest);
		if (k == 0 || (k < 0 && errno != EINTR))
			break;
		if (k > 0 && n + 1 < whylen)
			n += k;
	}
	close(out[0]);
	why[n] = 0;
	for (size_t i = 0; i < n; i++)
		if (why[i] == '\n')
			why[i] = i + 1 == n ? 0 : ' ';
	int ws;
	while (waitpid(child, &ws, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
		return 0;
	return errno = EPERM, -1;
}

/* map_with_tools writes PID 1's maps with newuidmap and newgidmap
 * (tools), or fails init saying what the tool said. */
static void map_with_tools(const char *const tools[2], pid_t pid, const char *maps, const char *gid_maps) {
	const char *text[2] = {maps, gid_maps};
	for (int i = 0; i < 2; i++) {
		char why[200], step[320];
		if (run_map_tool(tools[i], pid, text[i], why, sizeof why) == 0)
			continue;
		int err = errno;
		snprintf(step, sizeof step, "run %s%s%s", tools[i], why[0] ? ": " : "", why);
		init_fail(step, err);
	}
}

/* read_early_maps reads the maps text until the supervisor closes the
 * pipe: buf, or NULL if it sent none (or too much). */
static const char *read_early_maps(char *buf, size_t size) {
	size_t n = 0;
	for (;;) {
		ssize_t k = read(early_maps_fd, buf + n, size - 1 - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		if ((n += (size_t)k) == size - 1)
			return NULL;
	}
	close(early_maps_fd);
	buf[n] = 0;
	return n ? buf : NULL;
}

/* pid1_entry is PID 1 of the box, in the new namespaces: it waits until
 * its ID maps are written (the pipe mapped brings its host pid), then
 * carries out the plan. */
static void pid1_entry(void *arg) {
	int *mapped = arg;
	init_mark(STAGE_NAMESPACES);
	/* (getppid() is 0 here, the parent being outside the new PID
	 * namespace; had the parent died already, the closed pipe and
	 * control socket take the box down.) */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		init_fail("set the parent-death signal", errno);
	close(mapped[1]);
	if (early_maps_fd >= 0)
		close(early_maps_fd); /* the outer process's */
	if (early_cpus_away)
		sched_setaffinity(0, sizeof early_cpus, &early_cpus);
	int32_t host_pid;
	if (read(mapped[0], &host_pid, sizeof host_pid) != sizeof host_pid)
		_exit(1); /* the parent failed, and said why */
	close(mapped[0]);
	init_box_host_pid = host_pid;
	init_mark(STAGE_MAPS);
	_exit(run_box());
}

/* The stack of PID 1 (it shares this process's memory). */
static char pid1_stack[256 << 10] __attribute__((aligned(16)));

/* run_init starts PID 1 of the box in new namespaces, maps its user
 * namespace, and stays its parent, so that the supervisor's death
 * (PDEATHSIG on this process) takes the box down. PID 1 reads the plan
 * and carries it out.
 *
 * PID 1 is cloned straight into the namespaces, and this process stays in
 * the host's, still root there: it writes PID 1's ID maps itself (maps:
 * their text), with no round trip through the supervisor; or, for a user
 * whose box user is a subordinate id, runs tools (newuidmap and newgidmap,
 * absolute paths) to write them. And the
 * supervisor can start this process with vfork: Go must fully fork its
 * own address space to create a user namespace, which cost a millisecond
 * per run. */
static int run_init(unsigned long flags, const char *maps, const char *gid_maps, const char *const tools[2]) {
	/* (An early init has no maps yet: it reads them, once its
	 * namespaces are made, from early_maps_fd.) */
	init_arena_on = 1;
	init_rootless = gid_maps != NULL;
	init_groups_kept = init_rootless && !tools[0];
	init_mark_start();
	/* The box's /etc and mount points must be readable by the box user,
	 * whatever umask the caller had. */
	umask(022);
	/* The program's timed sleeps get the kernel's default slack, as a
	 * process started from a shell has, not the supervisor's (procs.h). */
	prctl(PR_SET_TIMERSLACK, 50000, 0, 0, 0);
	/* Nothing the supervisor passed may reach the program by accident. */
	syscall(SYS_close_range, 3, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */);
	/* isolate ignores these, as ioi/isolate does (cli/signals.go), and
	 * an ignored signal stays ignored across execve: the box's processes
	 * get their default actions. */
	static const int ignored[] = {SIGUSR1, SIGUSR2, SIGPIPE, SIGTTOU};
	for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
		signal(ignored[i], SIG_DFL);
	int mapped[2];
	if (pipe2(mapped, O_CLOEXEC) < 0)
		init_fail("create pipe", errno);
	/* PID 1 shares this process's memory (init_clone_run): it alone uses
	 * the C library's state from here on; this process only writes the
	 * maps and waits, on its own stack. */
	struct clone3_args args = {.flags = flags, .exit_signal = SIGCHLD};
	pid_t pid1 = init_clone_run(&args, pid1_stack, sizeof pid1_stack, pid1_entry, mapped);
	if (pid1 < 0)
		init_fail("create namespaces", errno);
	close(mapped[0]);
	char early_maps[256];
	if (early_maps_fd >= 0) {
		/* EOF before any: the supervisor has no use for this init,
		 * and waits until it and its PID 1 are gone. */
		if (!(maps = read_early_maps(early_maps, sizeof early_maps))) {
			kill(pid1, SIGKILL);
			while (waitpid(pid1, NULL, 0) < 0 && errno == EINTR)
				;
			_exit(1);
		}
	}
	if (tools[0])
		map_with_tools(tools, pid1, maps, gid_maps);
	else if (write_id_maps(pid1, maps, gid_maps) < 0)
		init_fail("write the user namespace's ID maps", errno);
	int32_t host_pid = pid1;
	if (write(mapped[1], &host_pid, sizeof host_pid) != sizeof host_pid)
		init_fail("start the box's PID 1", errno);
	/* Hold nothing of the box's: its streams end when PID 1's do. */
	syscall(SYS_close_range, 0, ~0U, 0);
	int ws;
	while (waitpid(pid1, &ws, 0) < 0)
		if (errno != EINTR)
			return 1;
	return WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
}

struct isolate_early_init isolate_early_init = {.pid = -1, .pidfd = -1, .ctl = -1, .status = -1, .maps = -1};

/* early_child becomes the early init: the descriptors a spawned init has
 * (the program's streams /dev/null until its command brings them), a CPU
 * other than parent_cpu (early_cpus), no signal blocked, the caller's
 * environment gone from its memory (PID 1 shares it); then init as if
 * execed. */
static __attribute__((noreturn)) void early_child(int ctl, int status, int maps, pid_t parent, unsigned long flags,
                                                  char **envp, int parent_cpu) {
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent)
		_exit(1);
	if (isolate_cpus_narrowed)
		early_cpus = isolate_caller_cpus;
	else if (sched_getaffinity(0, sizeof early_cpus, &early_cpus) < 0)
		_exit(1);
	cpu_set_t away = early_cpus;
	if (parent_cpu >= 0)
		CPU_CLR(parent_cpu, &away);
	early_cpus_away = CPU_COUNT(&away) > 0 && sched_setaffinity(0, sizeof away, &away) == 0;
	if (!early_cpus_away && isolate_cpus_narrowed)
		sched_setaffinity(0, sizeof early_cpus, &early_cpus);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (char **e = envp; e && *e; e++)
		memset(*e, 0, strlen(*e));
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	ctl = fcntl(ctl, F_DUPFD, INIT_FD_HIGH);
	status = fcntl(status, F_DUPFD, INIT_FD_HIGH);
	maps = fcntl(maps, F_DUPFD, INIT_FD_HIGH);
	if (null < 0 || ctl < 0 || status < 0 || maps < 0)
		_exit(1);
	for (int fd = 0; fd < 3; fd++)
		dup2(null, fd);
	dup2(ctl, ISOLATE_FD_CONTROL);
	dup2(status, ISOLATE_FD_STATUS);
	dup2(maps, ISOLATE_FD_EXTRA);
	syscall(SYS_close_range, ISOLATE_FD_EXTRA + 1, ~0U, 0);
	early_maps_fd = ISOLATE_FD_EXTRA;
	const char *tools[2] = {NULL, NULL};
	_exit(run_init(flags, NULL, NULL, tools));
}

void isolate_start_early_init(unsigned long flags, char **envp) {
	/* A closed standard descriptor would be taken by the pipes below. */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0)
			return;
	int ctl[2], status[2], maps[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) < 0)
		return;
	if (pipe2(status, O_CLOEXEC) < 0) {
		close(ctl[0]), close(ctl[1]);
		return;
	}
	if (pipe2(maps, O_CLOEXEC) < 0) {
		close(ctl[0]), close(ctl[1]), close(status[0]), close(status[1]);
		return;
	}
	pid_t parent = getpid();
	int cpu = sched_getcpu();
	pid_t pid = fork();
	if (pid == 0)
		early_child(ctl[1], status[1], maps[0], parent, flags, envp, cpu);
	close(ctl[1]), close(status[1]), close(maps[0]);
	/* The supervisor reads init's messages through Go's poller. */
	fcntl(status[0], F_SETFL, O_NONBLOCK);
	int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
	if (pidfd < 0) {
		close(ctl[0]), close(status[0]), close(maps[1]);
		if (pid > 0)
			waitpid(pid, NULL, 0); /* it ends at EOF on its maps pipe */
		return;
	}
	isolate_early_init = (struct isolate_early_init){
	    .pid = pid, .pidfd = pidfd, .ctl = ctl[0], .status = status[0], .maps = maps[1], .flags = flags};
}

#ifdef __GLIBC__
__attribute__((constructor)) static void isolate_init_entry(int argc, char **argv, char **envp) {
	(void)envp;
#else
#include "startargs.h"

/* musl calls constructors without arguments (startargs.h). */
__attribute__((constructor)) static void isolate_init_entry(void) {
	long argc;
	char **argv, **envp;
	isolate_start_args(&argc, &argv, &envp);
#endif
	if (argc >= 4 && strcmp(argv[1], ISOLATE_INIT_ARG) == 0) {
		const char *tools[2] = {argc >= 7 ? argv[5] : NULL, argc >= 7 ? argv[6] : NULL};
		_exit(run_init(strtoul(argv[2], NULL, 10), argv[3], argc >= 5 ? argv[4] : NULL, tools));
	}
	/* The supervisor (or a test): see procs.h. A benchmark times other
	 * processes as their callers would, with the kernel's default slack
	 * (with 1 ms, Go's HTTP client took 2.5 ms longer to see an answer). */
	isolate_narrow_cpus();
	if (argc < 2 || strcmp(argv[1], "bench") != 0)
		isolate_relax_timers();
}

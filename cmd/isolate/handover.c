/*
 * The handover: a one-shot run handed to the running service before the
 * Go runtime starts (package handover holds the service's end and the
 * protocol, ../../service/handover/protocol.h).
 *
 * It runs in every start of the isolate binary, first thing: from the
 * binary's entry point (isolateentry, before the C library sets itself
 * up) where the link made that the entry (handover.go, x86-64), else from
 * an ELF constructor. When the command line is a run (`run`, `exec`, or
 * the ioi form with `--run`), the caller did not opt out
 * (ISOLATE_NO_SERVICE) and sets no ISOLATE_ variable that only an
 * in-process run honours, it connects to the service's CLI socket (root's;
 * for a user who is not root, where root runs none, the user's own
 * service's), checks that root or the caller's own uid listens there, and
 * hands it argv, environ, the working directory and fds 0, 1, 2. If
 * anything of that fails, or the service declines, it returns and the Go
 * program runs the invocation itself, as if no service existed: nothing
 * has happened yet. Once the service accepted, the run is the service's:
 * this process relays the signals it gets and ends as the service says,
 * and never starts Go.
 *
 * Why before the C library: on a KVM guest without hardware-assisted paging each page a process
 * touches first costs a fault of 20-60 us, and the C library's start-up
 * touches eight pages of its own (its code at the far end of the text,
 * its data, its TLS) that a handed-over run never needs. So this file
 * uses none of it: raw system calls (sys below: no errno, which lives in
 * the TLS the C library has not set up yet), its own string functions,
 * and no stack protector (its canary lives there too).
 *
 * With no service, the cost is a few string compares, a socket and a
 * failed connect: microseconds.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h> /* its constants only: errno itself is the C library's */
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "early.h"
#include "protocol.h"

/* Nor may the compiler call the C library's memset or memcpy for a loop
 * of this file's (their pages would fault all the same). */
#pragma GCC optimize("no-tree-loop-distribute-patterns")

#define DEFAULT_SOCKET "/run/isolate/cli.sock"
#define SERVICE_ENDED "the service ended during the run"
#define DECISION_TIMEOUT_S 10

/* ---- system calls and strings, without the C library ---------------- */

#if defined(__x86_64__)
/* sys makes a system call: its result, or -errno. */
static long sys(long n, long a, long b, long c, long d, long e) {
	register long r10 __asm__("r10") = d, r8 __asm__("r8") = e;
	long ret;
	__asm__ volatile("syscall"
	                 : "=a"(ret)
	                 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
	                 : "rcx", "r11", "memory");
	return ret;
}
#else
/* Elsewhere only the constructor runs this file, the C library up. */
static long sys(long n, long a, long b, long c, long d, long e) {
	long r = syscall(n, a, b, c, d, e);
	return r < 0 ? -errno : r;
}
#endif
#define sys0(n) sys(n, 0, 0, 0, 0, 0)
#define sys1(n, a) sys(n, (long)(a), 0, 0, 0, 0)
#define sys2(n, a, b) sys(n, (long)(a), (long)(b), 0, 0, 0)
#define sys3(n, a, b, c) sys(n, (long)(a), (long)(b), (long)(c), 0, 0)
#define sys4(n, a, b, c, d) sys(n, (long)(a), (long)(b), (long)(c), (long)(d), 0)

static __attribute__((noreturn)) void sys_exit(int code) {
	for (;;)
		sys1(SYS_exit_group, code);
}

static size_t str_len(const char *s) {
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

static int str_eq(const char *a, const char *b) {
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

static int starts_with(const char *s, const char *prefix) {
	while (*prefix)
		if (*s++ != *prefix++)
			return 0;
	return 1;
}

static void copy(void *dst, const void *src, size_t n) {
	char *d = dst;
	const char *s = src;
	while (n--)
		*d++ = *s++;
}

/* hex_byte writes b as two lowercase hex digits. */
static void hex_byte(char *out, unsigned char b) {
	static const char digits[] = "0123456789abcdef";
	out[0] = digits[b >> 4];
	out[1] = digits[b & 15];
}

/* Signal masks as the kernel takes them (rt_sigprocmask, signalfd4). */
typedef unsigned long ksigset;
#define KSIGSET_SIZE sizeof(ksigset)
#define KSIG(s) (1UL << ((s)-1))

/* ---- the decision ---------------------------------------------------- */

/* is_run tells whether argv is a run: `run`, `exec`, or the ioi form (one
 * of its commands among the options before "--", as isIOIForm in ioi.go
 * decides) whose command is --run. */
static int is_run(int argc, char **argv) {
	if (argc < 2)
		return 0;
	if (str_eq(argv[1], "run") || str_eq(argv[1], "exec"))
		return 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (str_eq(a, "--"))
			return 0;
		if (str_eq(a, "--run"))
			return 1;
		if (str_eq(a, "--init") || str_eq(a, "--cleanup") || str_eq(a, "--version") || str_eq(a, "--print-cg-root") ||
		    str_eq(a, "--check-config"))
			return 0;
	}
	return 0;
}

/* service_socket returns the socket to hand the run to, or NULL to run
 * in-process: the caller opted out, or set an ISOLATE_ variable (a
 * configuration file, cgroup root, image or language directory...) that
 * the service, configured by its own environment, would not honour.
 * *given tells whether ISOLATE_SERVICE_SOCKET named it. */
static const char *service_socket(char **envp, int *given) {
	const char *sock = DEFAULT_SOCKET;
	*given = 0;
	for (char **e = envp; *e; e++) {
		if (!starts_with(*e, "ISOLATE_"))
			continue;
		if (starts_with(*e, "ISOLATE_NO_SERVICE=")) {
			if ((*e)[sizeof "ISOLATE_NO_SERVICE=" - 1] != 0)
				return NULL;
		} else if (starts_with(*e, "ISOLATE_SERVICE_SOCKET=")) {
			sock = *e + sizeof "ISOLATE_SERVICE_SOCKET=" - 1;
			*given = 1;
		} else {
			return NULL;
		}
	}
	return *sock ? sock : NULL;
}

/* env_value is the value of variable name ("NAME=") in envp, or NULL. */
static const char *env_value(char **envp, const char *name) {
	for (char **e = envp; *e; e++)
		if (starts_with(*e, name))
			return *e + str_len(name);
	return NULL;
}

/* append copies s to out at *n, within size; -1 if it does not fit. */
static int append(char *out, size_t *n, size_t size, const char *s) {
	size_t l = str_len(s);
	if (*n + l >= size)
		return -1;
	copy(out + *n, s, l + 1);
	*n += l;
	return 0;
}

/* own_dir tells whether path is a directory of uid's alone (mode 0700,
 * not a link), as the isolate package's ownDir does. */
static int own_dir(const char *path, unsigned uid) {
	struct stat st;
	return sys4(SYS_newfstatat, AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
	       st.st_uid == uid && (st.st_mode & 077) == 0;
}

/* user_socket writes the CLI socket of a service the user uid (not root)
 * runs for itself into out, where isolate.UserRuntimeDir puts it:
 * $XDG_RUNTIME_DIR/isolate if that is a directory of the user's alone,
 * else $TMPDIR/isolate-UID (TMPDIR empty: /tmp), else, when another user
 * made that one, $HOME/.cache/isolate; -1 if it does not fit. */
static int user_socket(char **envp, unsigned uid, char *out, size_t size) {
	char num[16];
	int i = sizeof num - 1;
	num[i] = 0;
	do
		num[--i] = '0' + uid % 10;
	while ((uid /= 10) && i > 0);
	size_t n = 0;
	out[0] = 0;
	const char *xdg = env_value(envp, "XDG_RUNTIME_DIR=");
	if (xdg && xdg[0] == '/' && str_len(xdg) < size && own_dir(xdg, sys0(SYS_geteuid)))
		return append(out, &n, size, xdg) < 0 || append(out, &n, size, "/isolate/cli.sock") < 0 ? -1 : 0;
	const char *tmp = env_value(envp, "TMPDIR=");
	if (!tmp || !tmp[0])
		tmp = "/tmp";
	if (append(out, &n, size, tmp) < 0 || append(out, &n, size, "/isolate-") < 0 || append(out, &n, size, num + i) < 0)
		return -1;
	struct stat st;
	const char *home = env_value(envp, "HOME=");
	if (sys4(SYS_newfstatat, AT_FDCWD, out, &st, AT_SYMLINK_NOFOLLOW) == 0 && !own_dir(out, sys0(SYS_geteuid)) &&
	    home && home[0] == '/') {
		n = 0;
		out[0] = 0;
		return append(out, &n, size, home) < 0 || append(out, &n, size, "/.cache/isolate/cli.sock") < 0 ? -1 : 0;
	}
	return append(out, &n, size, "/cli.sock") < 0 ? -1 : 0;
}

/* connect_service connects to the service at path, a process of root's
 * or of this process's own user (SO_PEERCRED, as it listened): the run,
 * its descriptors and its directory go to nobody else. The socket, or
 * -1. */
static long connect_service(const char *path) {
	struct sockaddr_un addr;
	size_t plen = str_len(path);
	if (plen >= sizeof addr.sun_path)
		return -1;
	addr.sun_family = AF_UNIX;
	copy(addr.sun_path, path, plen + 1);
	long sock = sys3(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -1;
	struct ucred peer;
	socklen_t len = sizeof peer;
	if (sys3(SYS_connect, sock, &addr, offsetof(struct sockaddr_un, sun_path) + plen + 1) < 0 ||
	    sys(SYS_getsockopt, sock, SOL_SOCKET, SO_PEERCRED, (long)&peer, (long)&len) < 0 || len != sizeof peer ||
	    (peer.uid != 0 && peer.uid != (uid_t)sys0(SYS_geteuid))) {
		sys1(SYS_close, sock);
		return -1;
	}
	return sock;
}

/* aux_value is the value of type in the auxiliary vector, which the
 * kernel put after environ's terminating NULL; 0 if absent. */
static unsigned long aux_value(char **envp, unsigned long type) {
	char **e = envp;
	while (*e)
		e++;
	for (const unsigned long *a = (const unsigned long *)(e + 1); a[0] != AT_NULL; a += 2)
		if (a[0] == type)
			return a[1];
	return 0;
}

/* build_id is this binary's GNU build id in hex, read from its own
 * program headers in memory (no file is read): the service takes runs
 * only from the isolate binary it was built with. */
static int build_id(char **envp, char *out, size_t size) {
	const ElfW(Phdr) *ph = (const ElfW(Phdr) *)aux_value(envp, AT_PHDR);
	size_t n = aux_value(envp, AT_PHNUM);
	uintptr_t base = 0;
	if (!ph)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (ph[i].p_type == PT_PHDR)
			base = (uintptr_t)ph - ph[i].p_vaddr;
	for (size_t i = 0; i < n; i++) {
		if (ph[i].p_type != PT_NOTE)
			continue;
		const char *p = (const char *)(base + ph[i].p_vaddr), *end = p + ph[i].p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
			const char *name = p + sizeof *nh;
			const unsigned char *desc = (const unsigned char *)name + ((nh->n_namesz + 3) & ~3u);
			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && str_eq(name, "GNU") &&
			    2 * nh->n_descsz < size) {
				for (unsigned j = 0; j < nh->n_descsz; j++)
					hex_byte(out + 2 * j, desc[j]);
				out[2 * nh->n_descsz] = 0;
				return 0;
			}
			p = (const char *)desc + ((nh->n_descsz + 3) & ~3u);
		}
	}
	return -1;
}

/* The caller's CPU affinity as the isolate package's constructor
 * (isolate/procs.c) may have narrowed it already for the Go runtime's
 * boot, and the mask it kept. Not from the entry point (early), which
 * runs before it, and where even reading its flag would fault a page in. */
extern cpu_set_t isolate_caller_cpus;
extern int isolate_cpus_narrowed;

static int caller_cpus(cpu_set_t *set, int early) {
	if (!early && isolate_cpus_narrowed) {
		*set = isolate_caller_cpus;
		return 0;
	}
	long n = sys3(SYS_sched_getaffinity, 0, sizeof *set, set);
	if (n < 0)
		return -1;
	/* The kernel fills only its own mask's bytes. */
	for (size_t i = n; i < sizeof *set; i++)
		((char *)set)[i] = 0;
	return 0;
}

/* cpus_hex is a CPU mask as a request carries it: its bytes in hex,
 * trailing zero bytes left out (package handover's cpusHex). */
static void cpus_hex(const cpu_set_t *set, char *out) {
	const unsigned char *b = (const unsigned char *)set;
	size_t n = sizeof *set;
	while (n > 0 && b[n - 1] == 0)
		n--;
	for (size_t i = 0; i < n; i++)
		hex_byte(out + 2 * i, b[i]);
	out[2 * n] = 0;
}

/* working_dir puts the working directory's path in buf. A path longer
 * than buf is read on a stack of its own (long_working_dir), so that the
 * usual frame stays within the stack page the kernel already touched. */
static __attribute__((noinline)) int long_working_dir(int (*send)(void *, const char *), void *arg) {
	char buf[PATH_MAX];
	if (sys2(SYS_getcwd, buf, sizeof buf) <= 0 || buf[0] != '/')
		return -1;
	return send(arg, buf);
}

/* ---- the request ------------------------------------------------------ */

/* The request goes out as it lies in memory, gathered (sendmsg's iovecs):
 * a header, the strings the CLI makes (build id, directory, CPUs, umask),
 * then argv and environ. The kernel laid argv's and environ's strings end
 * to end on the stack, NUL-terminated, which is the body's own format:
 * one iovec covers them all. */
#define REQUEST_IOVS 6

/* strings_end returns the end of v's n strings if they lie end to end
 * from p, else NULL (something rearranged them: the run goes in-process,
 * as without a service). */
static const char *strings_end(char *const *v, size_t n, const char *p) {
	for (size_t i = 0; i < n; i++) {
		if (!p || v[i] != p)
			return NULL;
		p += str_len(p) + 1;
	}
	return p;
}

struct request {
	int sock, argc, dir;
	char **argv, **envp;
	const char *build, *cpus, *mask;
};

/* send_request sends the request (doc.go of package handover), fds 0, 1,
 * 2 and the directory attached to its first byte. */
static int send_request(void *arg, const char *cwd) {
	const struct request *r = arg;
	uint32_t head[4] = {HANDOVER_MAGIC, 0, (uint32_t)r->argc, 0};
	for (char **e = r->envp; *e; e++)
		head[3]++;
	struct iovec iov[REQUEST_IOVS];
	size_t niov = 0;
	iov[niov++] = (struct iovec){head, sizeof head};
	const char *meta[] = {r->build, cwd, r->cpus, r->mask};
	for (size_t i = 0; i < 4; i++)
		iov[niov++] = (struct iovec){(void *)meta[i], str_len(meta[i]) + 1};
	const char *args_end = strings_end(r->argv, r->argc, r->argv[0]); /* (argc >= 2: is_run) */
	const char *env_end = args_end ? strings_end(r->envp, head[3], args_end) : NULL;
	if (!env_end)
		return -1;
	iov[niov++] = (struct iovec){r->argv[0], (size_t)(env_end - r->argv[0])};
	size_t total = 0;
	for (size_t i = 0; i < niov; i++)
		total += iov[i].iov_len;
	head[1] = (uint32_t)(total - 8);
	if (total - 8 > HANDOVER_MAX_BODY)
		return -1;
	int fds[HANDOVER_NFDS] = {0, 1, 2, r->dir};
	union {
		char buf[CMSG_SPACE(sizeof fds)];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = niov, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof fds);
	copy(CMSG_DATA(c), fds, sizeof fds);
	/* A stream socket may take part of it: go on from where it stopped. */
	while (msg.msg_iovlen > 0) {
		long n = sys3(SYS_sendmsg, r->sock, &msg, MSG_NOSIGNAL);
		if (n == -EINTR)
			continue;
		if (n <= 0)
			return -1;
		msg.msg_control = NULL, msg.msg_controllen = 0;
		while (msg.msg_iovlen > 0 && (size_t)n >= msg.msg_iov->iov_len)
			n -= msg.msg_iov->iov_len, msg.msg_iov++, msg.msg_iovlen--;
		if (msg.msg_iovlen > 0)
			msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + n, msg.msg_iov->iov_len -= n;
	}
	return 0;
}

/* read_full reads n bytes; 0 on success, -1 on EOF or error. */
static int read_full(int fd, void *p, size_t n) {
	for (size_t off = 0; off < n;) {
		long r = sys3(SYS_read, fd, (char *)p + off, n - off);
		if (r == -EINTR)
			continue;
		if (r <= 0)
			return -1;
		off += r;
	}
	return 0;
}

/* ---- the run, once the service took it -------------------------------- */

/* The signals a run relays, as the in-process CLI catches them
 * (signals.go). */
#define RELAYED                                                                                              \
	(KSIG(SIGTERM) | KSIG(SIGINT) | KSIG(SIGHUP) | KSIG(SIGQUIT) | KSIG(SIGILL) | KSIG(SIGABRT) | KSIG(SIGFPE) | \
	 KSIG(SIGSEGV) | KSIG(SIGBUS))

/* The kernel's struct sigaction (rt_sigaction): only SIG_DFL and SIG_IGN
 * are set here, which need no restorer. */
struct ksigaction {
	unsigned long handler, flags, restorer;
	ksigset mask;
};

static void set_disposition(int sig, unsigned long handler) {
	struct ksigaction sa = {.handler = handler};
	sys4(SYS_rt_sigaction, sig, &sa, NULL, KSIGSET_SIZE);
}

/* The signals a run ignores, as ioi/isolate does: SIGPIPE (a write to a
 * closed stream fails instead), SIGUSR1, SIGUSR2, and SIGTTOU (which would
 * stop the CLI while the run goes on). */
static const int ignored_signals[] = {SIGUSR1, SIGUSR2, SIGPIPE, SIGTTOU};

/* die_of ends this process by sig, as its default action does. */
static __attribute__((noreturn)) void die_of(int sig) {
	set_disposition(sig, (unsigned long)SIG_DFL);
	ksigset set = KSIG(sig);
	sys4(SYS_rt_sigprocmask, SIG_UNBLOCK, &set, NULL, KSIGSET_SIZE);
	sys2(SYS_kill, sys0(SYS_getpid), sig);
	sys_exit(128 + sig);
}

/* The ioi form's options, as its parser (cli/ioi/opts.go, ioiOpts) reads
 * them: the long name, the short letter (0: none), whether a value
 * follows. A test (cli/ioi/handover_opts_test.go) keeps the two in step. */
enum { IOI_ARG_NONE, IOI_ARG_REQUIRED, IOI_ARG_OPTIONAL };
struct ioi_opt {
	const char *name;
	char letter;
	char arg;
};
static const struct ioi_opt ioi_opts[] = {
	/* ioi options: begin */
	{"as-uid", 0, IOI_ARG_REQUIRED},
	{"as-gid", 0, IOI_ARG_REQUIRED},
	{"box-id", 'b', IOI_ARG_REQUIRED},
	{"check-config", 0, IOI_ARG_NONE},
	{"chdir", 'c', IOI_ARG_REQUIRED},
	{"cg", 0, IOI_ARG_NONE},
	{"cg-mem", 0, IOI_ARG_REQUIRED},
	{"cg-timing", 0, IOI_ARG_NONE},
	{"no-cg-timing", 0, IOI_ARG_NONE},
	{"cleanup", 0, IOI_ARG_NONE},
	{"core", 0, IOI_ARG_REQUIRED},
	{"dir", 'd', IOI_ARG_REQUIRED},
	{"no-default-dirs", 'D', IOI_ARG_NONE},
	{"fsize", 'f', IOI_ARG_REQUIRED},
	{"env", 'E', IOI_ARG_REQUIRED},
	{"extra-time", 'x', IOI_ARG_REQUIRED},
	{"full-env", 'e', IOI_ARG_NONE},
	{"inherit-fds", 0, IOI_ARG_NONE},
	{"init", 0, IOI_ARG_NONE},
	{"mem", 'm', IOI_ARG_REQUIRED},
	{"meta", 'M', IOI_ARG_REQUIRED},
	{"processes", 'p', IOI_ARG_OPTIONAL},
	{"quota", 'q', IOI_ARG_REQUIRED},
	{"run", 0, IOI_ARG_NONE},
	{"share-net", 0, IOI_ARG_NONE},
	{"silent", 's', IOI_ARG_NONE},
	{"stack", 'k', IOI_ARG_REQUIRED},
	{"open-files", 'n', IOI_ARG_REQUIRED},
	{"print-cg-root", 0, IOI_ARG_NONE},
	{"special-files", 0, IOI_ARG_NONE},
	{"stderr", 'r', IOI_ARG_REQUIRED},
	{"stderr-to-stdout", 0, IOI_ARG_NONE},
	{"stdin", 'i', IOI_ARG_REQUIRED},
	{"stdout", 'o', IOI_ARG_REQUIRED},
	{"syscalls", 0, IOI_ARG_REQUIRED},
	{"time", 't', IOI_ARG_REQUIRED},
	{"tty-hack", 0, IOI_ARG_NONE},
	{"verbose", 'v', IOI_ARG_NONE},
	{"version", 0, IOI_ARG_NONE},
	{"wait", 0, IOI_ARG_NONE},
	{"wall-time", 'w', IOI_ARG_REQUIRED},
	/* ioi options: end */
	{0, 0, 0},
};

/* ioi_long finds the long option named by the len characters at name:
 * its whole name or an unambiguous prefix of it, as getopt_long (and
 * findLong in cli/ioi/opts.go) take it; NULL if unknown or ambiguous. */
static const struct ioi_opt *ioi_long(const char *name, size_t len) {
	const struct ioi_opt *found = NULL;
	int n = 0;
	if (len == 0)
		return NULL;
	for (const struct ioi_opt *o = ioi_opts; o->name; o++) {
		size_t k = 0;
		while (k < len && o->name[k] == name[k])
			k++;
		if (k < len)
			continue;
		if (o->name[len] == 0)
			return o;
		found = o, n++;
	}
	return n == 1 ? found : NULL;
}

static const struct ioi_opt *ioi_short(char c) {
	for (const struct ioi_opt *o = ioi_opts; o->name; o++)
		if (o->letter == c)
			return o;
	return NULL;
}

/* ioi_meta returns the meta file (-M) of an ioi command line, or NULL. */
static const char *ioi_meta(int argc, char **argv) {
	const char *meta = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (str_eq(a, "--"))
			break;
		if (starts_with(a, "--")) {
			const char *eq = a + 2;
			while (*eq && *eq != '=')
				eq++;
			const struct ioi_opt *o = ioi_long(a + 2, (size_t)(eq - a - 2));
			if (!o)
				continue;
			const char *val = *eq ? eq + 1 : NULL;
			if (!val && o->arg == IOI_ARG_REQUIRED && i + 1 < argc)
				val = argv[++i];
			if (o->letter == 'M')
				meta = val;
			continue;
		}
		if (a[0] != '-' || a[1] == 0)
			continue;
		for (const char *c = a + 1; *c; c++) {
			const struct ioi_opt *o = ioi_short(*c);
			if (!o || o->arg == IOI_ARG_NONE)
				continue;
			const char *val = c[1] ? c + 1 : NULL;
			if (!val && o->arg == IOI_ARG_REQUIRED && i + 1 < argc)
				val = argv[++i];
			if (*c == 'M')
				meta = val;
			break;
		}
	}
	return meta && *meta ? meta : NULL;
}

/* wants_json tells whether a native command line asks for the JSON
 * report on standard output. */
static int wants_json(int argc, char **argv) {
	for (int i = 2; i < argc; i++) {
		if (str_eq(argv[i], "--"))
			break;
		if (str_eq(argv[i], "--json") || str_eq(argv[i], "-json") || str_eq(argv[i], "--json=true"))
			return 1;
	}
	return 0;
}

static void write_all(int fd, const char *s) {
	for (size_t n = str_len(s); n > 0;) {
		long w = sys3(SYS_write, fd, s, n);
		if (w == -EINTR)
			continue;
		if (w <= 0)
			return;
		s += w, n -= w;
	}
}

/* service_ended reports a run the service never finished (it stopped or
 * died): status XX in every form the caller asked for, exit status 2. */
static __attribute__((noreturn)) void service_ended(int argc, char **argv) {
	write_all(2, "isolate: " SERVICE_ENDED "\n");
	if (str_eq(argv[1], "run") || str_eq(argv[1], "exec")) {
		if (wants_json(argc, argv))
			write_all(1, "{\"status\":\"XX\",\"message\":\"" SERVICE_ENDED "\"}\n");
		sys_exit(2);
	}
	const char *meta = ioi_meta(argc, argv);
	if (meta) {
		long fd = str_eq(meta, "-") ? 1
		                            : sys4(SYS_openat, AT_FDCWD, meta, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0)
			write_all(fd, "status:XX\nmessage:" SERVICE_ENDED "\n");
	}
	sys_exit(2);
}

/* relay forwards the relayed signals to the service and waits for the
 * exit. They stay blocked, as they have been since before the request:
 * a signalfd reads them, what came while the service decided included
 * (a handler would write to a pipe from a page of its own, and the C
 * library's sigaction touches two more). SIGPIPE is ignored since the
 * start (ignored_signals): a write to a closed stream fails rather than
 * killing the CLI silently. */
static __attribute__((noreturn)) void relay(int sock, int argc, char **argv) {
	ksigset set = RELAYED;
	long sfd = sys4(SYS_signalfd4, -1, &set, KSIGSET_SIZE, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		service_ended(argc, argv);
	char ans[12];
	size_t got = 0;
	for (;;) {
		struct pollfd p[2] = {{.fd = sock, .events = POLLIN}, {.fd = (int)sfd, .events = POLLIN}};
		/* ppoll with no timeout and no mask: poll(2) is not a system
		 * call on arm64. */
		long r = sys4(SYS_ppoll, p, 2, NULL, NULL);
		if (r == -EINTR)
			continue;
		if (r < 0)
			service_ended(argc, argv);
		if (p[1].revents & POLLIN) {
			struct signalfd_siginfo si[4];
			long n = sys3(SYS_read, sfd, si, sizeof si);
			unsigned char sigs[4];
			size_t k = 0;
			for (long i = 0; i < n / (long)sizeof si[0]; i++)
				sigs[k++] = (unsigned char)si[i].ssi_signo;
			if (k > 0)
				sys(SYS_sendto, sock, (long)sigs, k, MSG_NOSIGNAL, 0);
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			long n = sys3(SYS_read, sock, ans + got, sizeof ans - got);
			if (n == -EINTR)
				continue;
			if (n <= 0)
				service_ended(argc, argv);
			got += n;
			if (got < sizeof ans)
				continue;
			uint32_t tag;
			int32_t code, sig;
			copy(&tag, ans, 4);
			copy(&code, ans + 4, 4);
			copy(&sig, ans + 8, 4);
			if (tag != HANDOVER_EXIT)
				service_ended(argc, argv);
			if (sig > 0 && sig < NSIG)
				die_of(sig);
			sys_exit(code);
		}
	}
}

/* The reason the service declined this process's run, and its socket
 * (handoverDeclined in handover.go reads them): a run that goes
 * in-process says why when it fails where the service would have run it
 * (a user who is not root, after an upgrade the service has not taken). */
static char declined_reason[512], declined_socket[sizeof(((struct sockaddr_un *)0)->sun_path)];

const char *isolate_declined_reason(void) { return declined_reason; }
const char *isolate_declined_socket(void) { return declined_socket; }

/* keep_reason reads the n bytes of a decline's reason (what fits). */
static void keep_reason(int sock, uint32_t n, const char *path) {
	if (n >= sizeof declined_reason)
		n = sizeof declined_reason - 1;
	if (read_full(sock, declined_reason, n) < 0) {
		declined_reason[0] = 0;
		return;
	}
	declined_reason[n] = 0;
	size_t i = 0;
	for (; path[i] && i < sizeof declined_socket - 1; i++)
		declined_socket[i] = path[i];
	declined_socket[i] = 0;
}

/* hand_over hands the run to the service and ends this process there,
 * or returns (having changed nothing) for the run to go in-process. */
static void hand_over(int argc, char **argv, char **envp, int early) {
	int given;
	const char *path = service_socket(envp, &given);
	if (!path)
		return;
	/* A closed standard descriptor cannot be handed over. */
	for (int fd = 0; fd < 3; fd++)
		if (sys2(SYS_fcntl, fd, F_GETFD) < 0)
			return;
	long sock = connect_service(path);
	/* A user who is not root, where root runs no service: a service of
	 * the user's own, if it runs one. */
	char own[sizeof(((struct sockaddr_un *)0)->sun_path)];
	long uid = sys0(SYS_geteuid);
	if (sock < 0 && !given && uid != 0 && user_socket(envp, (unsigned)uid, own, sizeof own) == 0) {
		sock = connect_service(own);
		path = own;
	}
	if (sock < 0)
		return;
	/* A service that hangs before it answers (it answers in
	 * microseconds) is given up on: the run goes in-process. */
	struct timeval deciding = {.tv_sec = DECISION_TIMEOUT_S};
	sys(SYS_setsockopt, sock, SOL_SOCKET, SO_RCVTIMEO, (long)&deciding, sizeof deciding);
	sys(SYS_setsockopt, sock, SOL_SOCKET, SO_SNDTIMEO, (long)&deciding, sizeof deciding);
	/* The signals the run relays wait while the service decides: once it
	 * accepted, they are relayed; if it declines, they take their default
	 * action, as they do before an in-process run catches them. */
	ksigset block = RELAYED, caller_mask = 0;
	sys4(SYS_rt_sigprocmask, SIG_BLOCK, &block, &caller_mask, KSIGSET_SIZE);
	char build[2 * 64 + 1], cpus[2 * sizeof(cpu_set_t) + 1], mask[8], cwd[256];
	cpu_set_t cpu_set;
	long dir = sys4(SYS_openat, AT_FDCWD, ".", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
	uint32_t ans[3];
	long m = sys1(SYS_umask, 0); /* one thread: nothing else creates files now */
	sys1(SYS_umask, m);
	for (int i = 3; i >= 0; i--, m >>= 3)
		mask[i] = '0' + (m & 7);
	mask[4] = 0;
	if (caller_cpus(&cpu_set, early) == 0)
		cpus_hex(&cpu_set, cpus);
	else
		cpus[0] = '?', cpus[1] = 0;
	struct request req = {.sock = (int)sock, .argc = argc, .dir = (int)dir, .argv = argv, .envp = envp,
	                      .build = build, .cpus = cpus, .mask = mask};
	int sent = -1;
	if (dir >= 0 && build_id(envp, build, sizeof build) == 0) {
		long n = sys2(SYS_getcwd, cwd, sizeof cwd);
		if (n > 0 && cwd[0] == '/') /* (not "(unreachable)...", as getcwd(3) refuses) */
			sent = send_request(&req, cwd);
		else if (n == -ERANGE)
			sent = long_working_dir(send_request, &req);
	}
	int answered = sent == 0 && read_full(sock, ans, sizeof ans) == 0;
	if (!answered || ans[0] != HANDOVER_ACCEPTED) {
		/* Declined, or no answer: the service did nothing. The reason
		 * is kept for the in-process run's messages. */
		if (answered && ans[0] == HANDOVER_DECLINED)
			keep_reason((int)sock, ans[1], path);
		if (dir >= 0)
			sys1(SYS_close, dir);
		sys1(SYS_close, sock);
		sys4(SYS_rt_sigprocmask, SIG_SETMASK, &caller_mask, NULL, KSIGSET_SIZE);
		return;
	}
	sys1(SYS_close, dir);
	/* This process stands for the run: it shows the caller's affinity, as
	 * an in-process supervisor does once Go restored it. */
	if (!early && isolate_cpus_narrowed)
		sys3(SYS_sched_setaffinity, 0, sizeof cpu_set, &cpu_set);
	relay((int)sock, argc, argv);
}

/* handover_tried: the entry point decided already (and the run stays
 * in-process); the constructor does not ask the service again. */
static int handover_tried;

/* in_process: the command line is a run that stays in-process. */
static int in_process;

/* refuse_setuid ends a start of this binary setuid, setgid or with file
 * capabilities (the kernel's AT_SECURE): isolate has no checks for a caller whose rights
 * differ from its own, it runs boxes as whoever runs it. ioi/isolate's
 * Debian package makes its /usr/bin/isolate setuid root for the group
 * isolate with dpkg-statoverride, which outlives that package when this
 * one replaces it. */
static void refuse_setuid(char **envp) {
	if (aux_value(envp, AT_SECURE) == 0)
		return;
	write_all(2, "isolate: this binary was started setuid, setgid or with file capabilities, which it does not support (a dpkg-statoverride "
	             "ioi/isolate's package left?): as root, dpkg-statoverride --remove /usr/bin/isolate; "
	             "chmod 0755 /usr/bin/isolate (MIGRATING.md, \"From ioi/isolate's package\")\n");
	sys_exit(2);
}

static void handover(int argc, char **argv, char **envp, int early) {
	refuse_setuid(envp);
	/* Only the isolate command hands over, not its test binary. */
	size_t n = argc > 0 ? str_len(argv[0]) : 0;
	int test = n >= 5 && str_eq(argv[0] + n - 5, ".test");
	if (!test && is_run(argc, argv)) {
		/* Ignored from the start, as ioi/isolate's keeper ignores them,
		 * whether the run is handed over or stays in-process (where Go
		 * keeps them ignored: cli/signals.go). */
		for (size_t i = 0; i < sizeof ignored_signals / sizeof ignored_signals[0]; i++)
			set_disposition(ignored_signals[i], (unsigned long)SIG_IGN);
		hand_over(argc, argv, envp, early); /* returns if the run stays in-process */
		in_process = 1;
	}
	handover_tried = 1;
}

/* The namespaces of a box with its own network (the default): the early
 * init's (../../isolate/boxinit/early.h). */
#define EARLY_FLAGS (CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET)

/* start_early starts a box's init for a run that stays in-process, as
 * root, while the Go runtime starts: unless the options before the
 * command may ask for the host's network (the supervisor would not take
 * that init, it spawns its own). */
static void start_early(int argc, char **argv, char **envp) {
	if (!in_process || sys0(SYS_geteuid) != 0)
		return;
	for (int i = 1; i < argc && !str_eq(argv[i], "--"); i++)
		if (str_eq(argv[i], "--share-net") || starts_with(argv[i], "--net") || starts_with(argv[i], "-net"))
			return;
	isolate_start_early_init(EARLY_FLAGS, envp);
}

#if defined(__x86_64__)
/* isolateentry is the binary's entry point (handover.go links it so): it
 * runs handover on the stack the kernel made (argc, argv, environ), then
 * starts the C library (_start) on that same stack, as the kernel would
 * have. rbx is callee-saved: it keeps the stack pointer across the call;
 * rdx is zero again for _start, as the kernel leaves it. */
void isolate_entry_c(long *sp) { handover((int)sp[0], (char **)(sp + 1), (char **)(sp + 2 + sp[0]), 1); }

__asm__(".text\n"
        ".globl isolateentry\n"
        ".type isolateentry, @function\n"
        "isolateentry:\n"
        "	xor %ebp, %ebp\n"
        "	mov %rsp, %rbx\n"
        "	mov %rsp, %rdi\n"
        "	and $-16, %rsp\n"
        "	call isolate_entry_c\n"
        "	mov %rbx, %rsp\n"
        "	xor %ebx, %ebx\n"
        "	xor %edx, %edx\n"
        "	jmp _start\n"
        ".size isolateentry, .-isolateentry\n");
#endif

#ifdef __GLIBC__
__attribute__((constructor)) static void isolate_handover_entry(int argc, char **argv, char **envp) {
#else
#include "startargs.h"

/* musl calls constructors without arguments (isolate/startargs.h). */
__attribute__((constructor)) static void isolate_handover_entry(void) {
	long argc;
	char **argv, **envp;
	isolate_start_args(&argc, &argv, &envp);
#endif
	if (!handover_tried)
		handover((int)argc, argv, envp, 0);
	start_early((int)argc, argv, envp);
}

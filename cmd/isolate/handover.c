/*
 * The handover: a one-shot run handed to the running service before the
 * Go runtime starts (package handover holds the service's end and the
 * protocol, ../../handover/protocol.h).
 *
 * This constructor runs in every start of the isolate binary. When the
 * command line is a run (`run`, `exec`, or the ioi form with `--run`), the
 * caller did not opt out (ISOLATE_NO_SERVICE) and sets no ISOLATE_
 * variable that only an in-process run honours, it connects to the
 * service's CLI socket and hands it argv, environ, the working directory
 * and fds 0, 1, 2. If anything of that fails, or the service declines,
 * it returns and the Go program runs the invocation itself, as if no
 * service existed: nothing has happened yet. Once the service accepted,
 * the run is the service's: this process relays the signals it gets and
 * ends as the service says, and never starts Go.
 *
 * With no service, the cost is a few string compares, a socket and a
 * failed connect: microseconds.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "protocol.h"

#define DEFAULT_SOCKET "/run/isolate/cli.sock"
#define SERVICE_ENDED "the service ended during the run"
#define DECISION_TIMEOUT_S 10

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* hex_byte writes b as two lowercase hex digits. (Not snprintf: on the
 * project's VMs every code page a start touches costs a fault, ~10 us,
 * and printf's machinery spans several.) */
static void hex_byte(char *out, unsigned char b) {
	static const char digits[] = "0123456789abcdef";
	out[0] = digits[b >> 4];
	out[1] = digits[b & 15];
}

/* is_run tells whether argv is a run: `run`, `exec`, or the ioi form (one
 * of its commands among the options before "--", as isIOIForm in ioi.go
 * decides) whose command is --run. */
static int is_run(int argc, char **argv) {
	if (argc < 2)
		return 0;
	if (strcmp(argv[1], "run") == 0 || strcmp(argv[1], "exec") == 0)
		return 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0)
			return 0;
		if (strcmp(a, "--run") == 0)
			return 1;
		if (strcmp(a, "--init") == 0 || strcmp(a, "--cleanup") == 0 || strcmp(a, "--version") == 0 ||
		    strcmp(a, "--print-cg-root") == 0)
			return 0;
	}
	return 0;
}

/* service_socket returns the socket to hand the run to, or NULL to run
 * in-process: the caller opted out, or set an ISOLATE_ variable (a
 * configuration file, cgroup root, image or language directory...) that
 * the service, configured by its own environment, would not honour. */
static const char *service_socket(char **envp) {
	const char *sock = DEFAULT_SOCKET;
	for (char **e = envp; *e; e++) {
		if (!starts_with(*e, "ISOLATE_"))
			continue;
		if (starts_with(*e, "ISOLATE_NO_SERVICE=")) {
			if ((*e)[sizeof "ISOLATE_NO_SERVICE=" - 1] != 0)
				return NULL;
		} else if (starts_with(*e, "ISOLATE_SERVICE_SOCKET=")) {
			sock = *e + sizeof "ISOLATE_SERVICE_SOCKET=" - 1;
		} else {
			return NULL;
		}
	}
	return *sock ? sock : NULL;
}

/* build_id is this binary's GNU build id in hex, read from its own
 * program headers in memory (no file is read): the service takes runs
 * only from the isolate binary it was built with. */
static int build_id(char *out, size_t size) {
	const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
	size_t n = getauxval(AT_PHNUM);
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
			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0 &&
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
 * boot, and the mask it kept. */
extern cpu_set_t isolate_caller_cpus;
extern int isolate_cpus_narrowed;

static int caller_cpus(cpu_set_t *set) {
	if (isolate_cpus_narrowed) {
		*set = isolate_caller_cpus;
		return 0;
	}
	return sched_getaffinity(0, sizeof *set, set);
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

/* The request goes out as it lies in memory, gathered (sendmsg's iovecs):
 * a header, the strings the CLI makes (build id, directory, CPUs, umask),
 * then argv and environ. The kernel laid argv's and environ's strings end
 * to end on the stack, NUL-terminated, which is the body's own format:
 * one iovec covers them all. Copying them into a buffer made the
 * constructor's frame three pages deep, and on the project's VMs every
 * new stack page is a fault of 20-30 us. */
#define REQUEST_IOVS 6

/* strings_end returns the end of v's n strings if they lie end to end
 * from p, else NULL (something rearranged them: the run goes in-process,
 * as without a service). */
static const char *strings_end(char *const *v, size_t n, const char *p) {
	for (size_t i = 0; i < n; i++) {
		if (!p || v[i] != p)
			return NULL;
		p += strlen(p) + 1;
	}
	return p;
}

/* send_request sends the request (doc.go of package handover), fds 0, 1,
 * 2 and cwd attached to its first byte. */
static int send_request(int sock, const char *build, const char *cwd, const char *cpus, const char *mask, int argc,
                        char **argv, char **envp, int dir) {
	uint32_t head[4] = {HANDOVER_MAGIC, 0, (uint32_t)argc, 0};
	for (char **e = envp; *e; e++)
		head[3]++;
	struct iovec iov[REQUEST_IOVS];
	size_t niov = 0;
	iov[niov++] = (struct iovec){head, sizeof head};
	const char *meta[] = {build, cwd, cpus, mask};
	for (size_t i = 0; i < 4; i++)
		iov[niov++] = (struct iovec){(void *)meta[i], strlen(meta[i]) + 1};
	const char *args_end = strings_end(argv, argc, argv[0]); /* (argc >= 2: is_run) */
	const char *env_end = args_end ? strings_end(envp, head[3], args_end) : NULL;
	if (!env_end)
		return -1;
	iov[niov++] = (struct iovec){argv[0], (size_t)(env_end - argv[0])};
	size_t total = 0;
	for (size_t i = 0; i < niov; i++)
		total += iov[i].iov_len;
	head[1] = (uint32_t)(total - 8);
	int fds[HANDOVER_NFDS] = {0, 1, 2, dir};
	union {
		char buf[CMSG_SPACE(sizeof fds)];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = niov, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof fds);
	memcpy(CMSG_DATA(c), fds, sizeof fds);
	if (total - 8 > HANDOVER_MAX_BODY)
		return -1;
	/* A stream socket may take part of it: go on from where it stopped. */
	while (msg.msg_iovlen > 0) {
		ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
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
		ssize_t r = read(fd, (char *)p + off, n - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		off += r;
	}
	return 0;
}

/* The signals a run relays, as the in-process CLI catches them
 * (signals.go), and the pipe their handler writes them to. */
static const int relayed[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT};
static int sig_pipe[2];

static void on_signal(int sig) {
	int saved = errno;
	unsigned char b = sig;
	(void)write(sig_pipe[1], &b, 1);
	errno = saved;
}

/* die_of ends this process by sig, as its default action does. */
static void die_of(int sig) {
	signal(sig, SIG_DFL);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	_exit(128 + sig);
}

/* The ioi form's options that take the next argument when given without
 * a value (ioi/opts.go). */
static const char ioi_short_args[] = "bcdfExmMqknriotw";
static const char *const ioi_long_args[] = {"as-uid", "as-gid", "box-id", "chdir",  "cg-mem",     "core", "dir",
                                            "fsize",  "env",    "extra-time", "mem", "meta", "quota", "stack",
                                            "open-files", "stderr", "stdin", "stdout", "time", "wall-time", NULL};

/* ioi_meta returns the meta file (-M) of an ioi command line, or NULL. */
static const char *ioi_meta(int argc, char **argv) {
	const char *meta = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0)
			break;
		if (starts_with(a, "--")) {
			const char *eq = strchr(a, '=');
			size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
			int takes = 0;
			for (const char *const *l = ioi_long_args; *l; l++)
				if (strlen(*l) == len && strncmp(a + 2, *l, len) == 0)
					takes = 1;
			const char *val = eq ? eq + 1 : (takes && i + 1 < argc ? argv[i + 1] : NULL);
			if (takes && !eq)
				i++;
			if (len == 4 && strncmp(a + 2, "meta", 4) == 0)
				meta = val;
			continue;
		}
		if (a[0] != '-' || a[1] == 0)
			continue;
		for (const char *c = a + 1; *c; c++) {
			if (!strchr(ioi_short_args, *c) && *c != 'p')
				continue;
			const char *val = c[1] ? c + 1 : NULL;
			if (!val && *c != 'p' && i + 1 < argc)
				val = argv[++i];
			if (*c == 'M')
				meta = val;
			break;
		}
	}
	return meta;
}

/* wants_json tells whether a native command line asks for the JSON
 * report on standard output. */
static int wants_json(int argc, char **argv) {
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if (strcmp(argv[i], "--json") == 0 || strcmp(argv[i], "-json") == 0 || strcmp(argv[i], "--json=true") == 0)
			return 1;
	}
	return 0;
}

static void write_all(int fd, const char *s) {
	for (size_t n = strlen(s); n > 0;) {
		ssize_t w = write(fd, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		s += w, n -= w;
	}
}

/* service_ended reports a run the service never finished (it stopped or
 * died): status XX in every form the caller asked for, exit status 2. */
static void service_ended(int argc, char **argv) {
	write_all(2, "isolate: " SERVICE_ENDED "\n");
	if (strcmp(argv[1], "run") == 0 || strcmp(argv[1], "exec") == 0) {
		if (wants_json(argc, argv))
			write_all(1, "{\"status\":\"XX\",\"message\":\"" SERVICE_ENDED "\"}\n");
		_exit(2);
	}
	const char *meta = ioi_meta(argc, argv);
	if (meta) {
		int fd = strcmp(meta, "-") == 0 ? 1 : open(meta, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0)
			write_all(fd, "status:XX\nmessage:" SERVICE_ENDED "\n");
	}
	_exit(2);
}

/* relay forwards signals to the service and waits for the exit. */
static void relay(int sock, int argc, char **argv) {
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		service_ended(argc, argv);
	struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof relayed / sizeof relayed[0]; i++)
		sigaction(relayed[i], &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* What came while the service was deciding is relayed now (and
	 * what the caller blocked too, as an in-process run catches it). */
	sigset_t set;
	sigemptyset(&set);
	for (size_t i = 0; i < sizeof relayed / sizeof relayed[0]; i++)
		sigaddset(&set, relayed[i]);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	char ans[12];
	size_t got = 0;
	for (;;) {
		struct pollfd p[2] = {{.fd = sock, .events = POLLIN}, {.fd = sig_pipe[0], .events = POLLIN}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			service_ended(argc, argv);
		}
		if (p[1].revents & POLLIN) {
			unsigned char sigs[16];
			ssize_t n = read(sig_pipe[0], sigs, sizeof sigs);
			if (n > 0)
				send(sock, sigs, n, MSG_NOSIGNAL);
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = read(sock, ans + got, sizeof ans - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				service_ended(argc, argv);
			got += n;
			if (got < sizeof ans)
				continue;
			uint32_t tag;
			int32_t code, sig;
			memcpy(&tag, ans, 4);
			memcpy(&code, ans + 4, 4);
			memcpy(&sig, ans + 8, 4);
			if (tag != HANDOVER_EXIT)
				service_ended(argc, argv);
			if (sig > 0 && sig < NSIG)
				die_of(sig);
			_exit(code);
		}
	}
}

/* hand_over hands the run to the service and ends this process there,
 * or returns (having changed nothing) for the run to go in-process. */
static void hand_over(int argc, char **argv, char **envp) {
	const char *path = service_socket(envp);
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	if (!path || strlen(path) >= sizeof addr.sun_path)
		return;
	/* A closed standard descriptor cannot be handed over. */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0)
			return;
	strcpy(addr.sun_path, path);
	int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return;
	if (connect(sock, (struct sockaddr *)&addr, sizeof addr) < 0) {
		close(sock);
		return;
	}
	/* A service that hangs before it answers (it answers in
	 * microseconds) is given up on: the run goes in-process. */
	struct timeval deciding = {.tv_sec = DECISION_TIMEOUT_S};
	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &deciding, sizeof deciding);
	setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &deciding, sizeof deciding);
	/* The signals the run relays wait while the service decides: once it
	 * accepted, they are relayed; if it declines, they take their default
	 * action, as they do before an in-process run catches them. */
	sigset_t block, caller_mask;
	sigemptyset(&block);
	for (size_t i = 0; i < sizeof relayed / sizeof relayed[0]; i++)
		sigaddset(&block, relayed[i]);
	sigprocmask(SIG_BLOCK, &block, &caller_mask);
	char build[2 * 64 + 1], cwd[PATH_MAX], cpus[2 * sizeof(cpu_set_t) + 1], mask[8];
	cpu_set_t cpu_set;
	int dir = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	uint32_t ans[3];
	mode_t m = umask(0); /* one thread: nothing else creates files now */
	umask(m);
	for (int i = 3; i >= 0; i--, m >>= 3)
		mask[i] = '0' + (m & 7);
	mask[4] = 0;
	if (caller_cpus(&cpu_set) == 0)
		cpus_hex(&cpu_set, cpus);
	else
		strcpy(cpus, "?");
	if (dir < 0 || !getcwd(cwd, sizeof cwd) || build_id(build, sizeof build) < 0 ||
	    send_request(sock, build, cwd, cpus, mask, argc, argv, envp, dir) < 0 || read_full(sock, ans, sizeof ans) < 0 ||
	    ans[0] != HANDOVER_ACCEPTED) {
		/* Declined (the reason follows; nobody needs it here), or no
		 * answer: the service did nothing. */
		if (dir >= 0)
			close(dir);
		close(sock);
		sigprocmask(SIG_SETMASK, &caller_mask, NULL);
		return;
	}
	close(dir);
	/* This process stands for the run: it shows the caller's affinity, as
	 * an in-process supervisor does once Go restored it. */
	if (isolate_cpus_narrowed)
		sched_setaffinity(0, sizeof cpu_set, &cpu_set);
	relay(sock, argc, argv);
}

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
	/* Only the isolate command hands over, not its test binary. */
	if (argc < 2)
		return;
	size_t n = strlen(argv[0]);
	if (n >= 5 && strcmp(argv[0] + n - 5, ".test") == 0)
		return;
	if (is_run(argc, argv))
		hand_over(argc, argv, envp);
}

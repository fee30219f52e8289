#!/bin/bash
# What a fresh box costs the machine at the least, against what the real
# paths cost (docs/PERFORMANCE.md, "Session K"): can the service reach 3x the
# one-shot CLI's throughput with two clients? Each case runs as two loops at
# once (two clients on two CPUs) for --seconds (4); the whole machine's CPU
# from /proc/stat (busy: all but idle and iowait; the kernel's deferred work
# and the service's included) is divided by the runs of both loops. The busy
# share is the loops' window; the CPU per run also counts 0.3 s after it (the
# last runs' deferred cleanup). --rounds (3) rounds, the cases in a rotating
# order, then each case's median:
#   oneshot: posix_spawn + waitpid of `bin/isolate run -- /bin/true`, its
#     output to /dev/null;
#   service: bin/isolate-serve, started here on a socket in a temporary
#     directory (--cli-socket none; 5 requests to warm it), answering
#     POST /v1/run {"commands":[{"args":["/bin/true"]}]} over HTTP/1.1 kept
#     alive on its unix socket; every answer must be 200 with "status":"OK"
#     (the pool's refills for the runs count; the few boxes it holds ready at
#     the end are built in the window, torn down after it);
#   http-floor: the same client posting {"commands":[{"args":[]}]}, which the
#     service answers 400 at once: an HTTP + JSON round trip through our
#     server without a run;
#   ns-exec-floor: clone of a child in a box's six new namespaces (user, PID,
#     mount, network, IPC, UTS) that execs /bin/true, and waitpid;
#   mounts-seccomp-floor: the same, the child first mapping its root to ours
#     (one-line uid and gid maps: without them the kernel makes no file in a
#     tmpfs of the new user namespace), making its mounts private, mounting a
#     tmpfs on /tmp, four directories in it and a tmpfs on each (size=1m), and
#     loading the default seccomp filter (seccomp/default_amd64.bpf, its
#     notifications made "allow", as scripts/vm-costs.sh does);
#   cgroup-floor: a box's v1 cgroups (cpu, cpuacct, memory, pids) made,
#     limited (memory and memsw 256 MiB, pids 64), read (cpuacct.usage,
#     memory.max_usage_in_bytes, pids.current) and removed;
#   cgroup-floor-memory: the memory cgroup alone, limited, read, removed.
# The floor of a box through the API, mounts-seccomp-floor +
# cgroup-floor-memory + http-floor, is printed beside the budget (the
# one-shot's CPU per run / 3) and the service's. The cgroups are made only
# under this script's own ones (/proc/self/cgroup), in isolate-floor-<pid>.
# Root; bin/isolate and bin/isolate-serve (make build). Builds four small C
# programs in a temporary directory with the project's C compiler
# (scripts/cgo-env.sh); removes it, the service and the cgroups at exit, on
# error and on Ctrl-C too. Others' work on the machine counts: run it alone.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/box-floor.sh [--seconds S (4)] [--rounds R (3)]"; }
seconds=4 rounds=3
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) seconds=${2-}; shift $(($# > 1 ? 2 : 1)) ;;
	--seconds=*) seconds=${1#*=}; shift ;;
	--rounds) rounds=${2-}; shift $(($# > 1 ? 2 : 1)) ;;
	--rounds=*) rounds=${1#*=}; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
for v in "$seconds" "$rounds"; do
	[[ $v =~ ^[1-9][0-9]{0,3}$ ]] || { echo "box-floor.sh: --seconds and --rounds take a whole number from 1" >&2; exit 2; }
done
if [ "$(id -u)" -ne 0 ]; then
	echo "box-floor.sh: this needs root (namespaces, cgroups, the service); please run it as root" >&2
	exit 1
fi
for b in isolate isolate-serve; do
	[ -x "bin/$b" ] || { echo "box-floor.sh: no bin/$b; run \`make build\` first" >&2; exit 1; }
done
. scripts/cgo-env.sh
read -ra cflags <<<"$CGO_CFLAGS"

work=$(mktemp -d)
serve_pid='' loop_pids=() cgdirs=()
cleanup() {
	local p d c i
	for p in "${loop_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${loop_pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ -n "$serve_pid" ]; then
		kill -TERM "$serve_pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$serve_pid" 2>/dev/null || true
		wait "$serve_pid" 2>/dev/null || true
	fi
	for d in "${cgdirs[@]}"; do
		for c in "$d"/b*/; do
			if [ -d "$c" ]; then rmdir "$c" || true; fi
		done
		rmdir "$d" || echo "box-floor.sh: could not remove $d" >&2
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

cat >"$work/oneshot.c" <<'EOF'
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
extern char **environ;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
/* oneshot SECONDS ISOLATE: runs of `ISOLATE run -- /bin/true` until SECONDS pass. */
static int run(char **args, int quiet) {
	posix_spawn_file_actions_t fa;
	pid_t p;
	int ws, e;
	if ((e = posix_spawn_file_actions_init(&fa)) || (e = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) ||
	    (e = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0)) ||
	    (quiet && (e = posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0))) ||
	    (e = posix_spawn(&p, args[0], &fa, NULL, args, environ))) {
		errno = e;
		perror("oneshot: posix_spawn");
		exit(1);
	}
	posix_spawn_file_actions_destroy(&fa);
	if (waitpid(p, &ws, 0) < 0) { perror("oneshot: waitpid"); exit(1); }
	return ws;
}
int main(int argc, char **argv) {
	if (argc != 3) { fprintf(stderr, "usage: oneshot SECONDS ISOLATE\n"); return 2; }
	char *args[] = {argv[2], "run", "--", "/bin/true", NULL};
	double end = now() + atof(argv[1]);
	long runs = 0;
	while (now() < end) {
		int ws = run(args, 1);
		if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
			fprintf(stderr, "oneshot: %s run -- /bin/true failed (wait status %#x); once more with its stderr:\n", argv[2], ws);
			run(args, 0);
			return 1;
		}
		runs++;
	}
	printf("%ld\n", runs);
	return 0;
}
EOF

cat >"$work/client.c" <<'EOF'
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void die(const char *m) { fprintf(stderr, "client: %s\n", m); exit(1); }
static const char *path;
static int fd = -1, closing = 1;
static char rb[1 << 20], body[1 << 20];
static size_t rpos, rlen, blen;
static void dial(void) {
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof a.sun_path) die("socket path too long");
	strcpy(a.sun_path, path);
	if (fd >= 0) close(fd);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
		perror("client: connect");
		exit(1);
	}
	rpos = rlen = 0;
	closing = 0;
}
/* more reads what the server sent next into rb; 0 at its end. */
static size_t more(void) {
	if (rpos) { memmove(rb, rb + rpos, rlen - rpos); rlen -= rpos; rpos = 0; }
	if (rlen == sizeof rb) die("response too large");
	ssize_t n;
	while ((n = read(fd, rb + rlen, sizeof rb - rlen)) < 0 && errno == EINTR)
		;
	if (n < 0) { perror("client: read"); exit(1); }
	rlen += n;
	return n;
}
/* line is the next line, without its CRLF (valid until the next read). */
static char *line(void) {
	char *e;
	while (!(e = memmem(rb + rpos, rlen - rpos, "\r\n", 2)))
		if (!more()) die("connection closed inside a response");
	char *l = rb + rpos;
	*e = 0;
	rpos = e + 2 - rb;
	return l;
}
static void take(size_t n) {
	if (n >= sizeof body - blen) die("response body too large");
	while (rlen - rpos < n)
		if (!more()) die("connection closed inside a body");
	memcpy(body + blen, rb + rpos, n);
	blen += n;
	rpos += n;
}
static int response(void) {
	int status;
	long cl = -1, chunked = 0;
	char *l = line();
	if (sscanf(l, "HTTP/1.%*d %d", &status) != 1) die("bad status line");
	while (*(l = line())) {
		if (!strncasecmp(l, "Content-Length:", 15)) cl = atol(l + 15);
		else if (!strncasecmp(l, "Transfer-Encoding:", 18) && strcasestr(l + 18, "chunked")) chunked = 1;
		else if (!strncasecmp(l, "Connection:", 11) && strcasestr(l + 11, "close")) closing = 1;
	}
	blen = 0;
	if (chunked) {
		for (size_t n; (n = strtoul(line(), NULL, 16));) {
			take(n);
			if (*line()) die("bad chunk end");
		}
		while (*line()) /* trailers */
			;
	} else if (cl >= 0) {
		take(cl);
	} else {
		while (more())
			;
		take(rlen - rpos);
		closing = 1;
	}
	body[blen] = 0;
	return status;
}
/* client SOCKET SECONDS MAXRUNS(0: no limit) STATUS BODY: POSTs BODY to /v1/run
 * until SECONDS pass, each answer expected to have STATUS (and with 200,
 * "status":"OK"); prints how many. */
int main(int argc, char **argv) {
	if (argc != 6) { fprintf(stderr, "usage: client SOCKET SECONDS MAXRUNS STATUS BODY\n"); return 2; }
	path = argv[1];
	double end = now() + atof(argv[2]);
	long max = atol(argv[3]), runs = 0;
	int expect = atoi(argv[4]);
	static char req[8192];
	int n = snprintf(req, sizeof req,
			 "POST /v1/run HTTP/1.1\r\nHost: isolate\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
			 strlen(argv[5]), argv[5]);
	if (n < 0 || n >= (int)sizeof req) die("request too long");
	signal(SIGPIPE, SIG_IGN);
	while ((!max || runs < max) && now() < end) {
		if (closing) dial();
		for (int off = 0; off < n;) {
			ssize_t w = write(fd, req + off, n - off);
			if (w < 0 && errno == EINTR) continue;
			if (w < 0) { perror("client: write"); return 1; }
			off += w;
		}
		int status = response();
		if (status != expect || (expect == 200 && !strstr(body, "\"status\":\"OK\""))) {
			fprintf(stderr, "client: answer %d, expected %d with%s \"status\":\"OK\": %.600s\n", status, expect,
				expect == 200 ? "" : "out needing", body);
			return 1;
		}
		runs++;
	}
	printf("%ld\n", runs);
	return 0;
}
EOF

cat >"$work/nsfloor.c" <<'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static struct sock_filter insns[BPF_MAXINSNS];
static struct sock_fprog prog = {.filter = insns};
static int mounts;
static char stack[1 << 16];
static int fail(const char *what) { perror(what); return 1; }
static int put(const char *file, const char *v) {
	int fd = open(file, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, v, strlen(v)) != (ssize_t)strlen(v)) return fail(file);
	return close(fd) ? fail(file) : 0;
}
static int child(void *arg) {
	char *args[] = {"/bin/true", NULL}, *env[] = {NULL}, dir[16];
	(void)arg;
	if (mounts) {
		if (put("/proc/self/setgroups", "deny") || put("/proc/self/uid_map", "0 0 1") || put("/proc/self/gid_map", "0 0 1"))
			return 1;
		if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) return fail("make mounts private");
		if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m")) return fail("mount a tmpfs on /tmp");
		for (int i = 0; i < 4; i++) {
			snprintf(dir, sizeof dir, "/tmp/d%d", i);
			if (mkdir(dir, 0755)) return fail(dir);
			if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m")) return fail(dir);
		}
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return fail("PR_SET_NO_NEW_PRIVS");
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) return fail("seccomp");
	}
	execve(args[0], args, env);
	perror("execve /bin/true");
	return 127;
}
/* nsfloor SECONDS ns | nsfloor SECONDS mounts BPF: boxes' namespaces (and
 * mounts and filter) around an exec of /bin/true until SECONDS pass. */
int main(int argc, char **argv) {
	if (argc < 3 || (mounts = !strcmp(argv[2], "mounts")) != (argc == 4)) {
		fprintf(stderr, "usage: nsfloor SECONDS ns | nsfloor SECONDS mounts BPF\n");
		return 2;
	}
	if (mounts) {
		FILE *f = fopen(argv[3], "rb");
		if (!f) return fail(argv[3]);
		size_t n = fread(insns, sizeof insns[0], BPF_MAXINSNS, f);
		if (ferror(f) || !n || fgetc(f) != EOF) { fprintf(stderr, "nsfloor: %s: not a filter\n", argv[3]); return 1; }
		fclose(f);
		for (size_t i = 0; i < n; i++) /* SECCOMP_RET_USER_NOTIF needs a listener */
			if (insns[i].code == (BPF_RET | BPF_K) && insns[i].k == 0x7fc00000U) insns[i].k = SECCOMP_RET_ALLOW;
		prog.len = n;
	}
	int flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD;
	double end = now() + atof(argv[1]);
	long runs = 0;
	while (now() < end) {
		int ws;
		pid_t p = clone(child, stack + sizeof stack, flags, NULL);
		if (p < 0) return fail("clone");
		if (waitpid(p, &ws, 0) < 0) return fail("waitpid");
		if (!WIFEXITED(ws) || WEXITSTATUS(ws)) { fprintf(stderr, "nsfloor: child failed (wait status %#x)\n", ws); return 1; }
		runs++;
	}
	printf("%ld\n", runs);
	return 0;
}
EOF

cat >"$work/cgfloor.c" <<'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void die(const char *what) { perror(what); exit(1); }
static char box[4][PATH_MAX + 32]; /* memory, cpu, cpuacct, pids */
static void put(int c, const char *file, const char *v) {
	char p[sizeof box[0] + 64];
	snprintf(p, sizeof p, "%s/%s", box[c], file);
	int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, v, strlen(v)) != (ssize_t)strlen(v) || close(fd)) die(p);
}
static void get(int c, const char *file) {
	char p[sizeof box[0] + 64], buf[64];
	snprintf(p, sizeof p, "%s/%s", box[c], file);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, buf, sizeof buf) <= 0 || close(fd)) die(p);
}
/* cgfloor SECONDS MEMORY [CPU CPUACCT PIDS]: a box's cgroups under these
 * parents made, limited, read and removed until SECONDS pass. */
int main(int argc, char **argv) {
	if (argc != 3 && argc != 6) { fprintf(stderr, "usage: cgfloor SECONDS MEMORY [CPU CPUACCT PIDS]\n"); return 2; }
	int n = argc - 2, uniq[4], nu = 0;
	char real[4][PATH_MAX], probe[PATH_MAX + 64];
	for (int c = 0; c < n; c++) {
		if (!realpath(argv[2 + c], real[c])) die(argv[2 + c]);
		snprintf(box[c], sizeof box[c], "%s/b%d", real[c], (int)getpid());
		int dup = 0; /* co-mounted controllers share one directory */
		for (int u = 0; u < nu; u++) dup |= !strcmp(real[uniq[u]], real[c]);
		if (!dup) uniq[nu++] = c;
	}
	snprintf(probe, sizeof probe, "%s/memory.memsw.limit_in_bytes", real[0]);
	int memsw = access(probe, F_OK) == 0;
	double end = now() + atof(argv[1]);
	long runs = 0;
	while (now() < end) {
		for (int u = 0; u < nu; u++)
			if (mkdir(box[uniq[u]], 0755)) die(box[uniq[u]]);
		put(0, "memory.limit_in_bytes", "268435456");
		if (memsw) put(0, "memory.memsw.limit_in_bytes", "268435456");
		if (n == 4) put(3, "pids.max", "64"), get(2, "cpuacct.usage");
		get(0, "memory.max_usage_in_bytes");
		if (n == 4) get(3, "pids.current");
		for (int u = nu - 1; u >= 0; u--)
			if (rmdir(box[uniq[u]])) die(box[uniq[u]]);
		runs++;
	}
	printf("%ld\n", runs);
	return 0;
}
EOF

for p in oneshot client nsfloor cgfloor; do
	"$CC" "${cflags[@]}" -O2 -static -o "$work/$p" "$work/$p.c"
done

# The cgroups' parents: isolate-floor-<pid> under this process's own cgroup
# of each controller (/proc/self/cgroup), never anywhere else.
declare -A cg=()
while IFS=: read -r _ ctrls path; do
	IFS=, read -ra list <<<"$ctrls"
	if [ "$path" = / ]; then path=; fi
	for c in "${list[@]}"; do
		case $c in cpu | cpuacct | memory | pids) cg[$c]=/sys/fs/cgroup/$c$path/isolate-floor-$$ ;; esac
	done
done <"/proc/$$/cgroup"
for c in cpu cpuacct memory pids; do
	if [ -z "${cg[$c]-}" ] || ! [ -d "$(dirname "${cg[$c]}")" ]; then
		echo "box-floor.sh: no cgroup v1 $c controller of this process under /sys/fs/cgroup/$c" >&2
		exit 1
	fi
	if ! [ -d "${cg[$c]}" ]; then # co-mounted controllers: made once
		mkdir "${cg[$c]}"
		cgdirs+=("${cg[$c]}")
	fi
done

sock=$work/api.sock
run_body='{"commands":[{"args":["/bin/true"]}]}'
empty_body='{"commands":[{"args":[]}]}'
bin/isolate-serve --socket "$sock" --cli-socket none --store "$work/files" >"$work/serve.log" 2>&1 &
serve_pid=$!
for ((i = 0; i < 50; i++)); do
	if [ -S "$sock" ] || ! kill -0 "$serve_pid" 2>/dev/null; then break; fi
	sleep 0.1
done
if ! [ -S "$sock" ]; then
	echo "box-floor.sh: bin/isolate-serve opened no socket within 5 s; its output:" >&2
	cat "$work/serve.log" >&2
	exit 1
fi
if ! "$work/client" "$sock" 60 5 200 "$run_body" >/dev/null; then
	echo "box-floor.sh: the warm-up requests failed; the service's output:" >&2
	cat "$work/serve.log" >&2
	exit 1
fi

clk=$(getconf CLK_TCK)
settle=0.3
# read_stat: the whole machine's busy and total ticks so far (/proc/stat's first
# line: user nice system idle iowait irq softirq steal; guest is in user).
read_stat() {
	local _cpu u n s i w q sq st _rest
	read -r _cpu u n s i w q sq st _rest </proc/stat
	total=$((u + n + s + i + w + q + sq + st))
	busy=$((total - i - w))
}
# run_case NAME ROUND: two loops of NAME at once; sets runs, share (%) and us
# (machine CPU microseconds per run).
run_case() {
	local -a cmd
	local name=$1 b0 t0 b1 t1 p failed=0
	case $name in
	oneshot) cmd=("$work/oneshot" "$seconds" "$PWD/bin/isolate") ;;
	service) cmd=("$work/client" "$sock" "$seconds" 0 200 "$run_body") ;;
	http-floor) cmd=("$work/client" "$sock" "$seconds" 0 400 "$empty_body") ;;
	ns-exec-floor) cmd=("$work/nsfloor" "$seconds" ns) ;;
	mounts-seccomp-floor) cmd=("$work/nsfloor" "$seconds" mounts "$PWD/seccomp/default_amd64.bpf") ;;
	cgroup-floor) cmd=("$work/cgfloor" "$seconds" "${cg[memory]}" "${cg[cpu]}" "${cg[cpuacct]}" "${cg[pids]}") ;;
	cgroup-floor-memory) cmd=("$work/cgfloor" "$seconds" "${cg[memory]}") ;;
	esac
	read_stat
	b0=$busy t0=$total
	"${cmd[@]}" >"$work/count.1" &
	loop_pids=("$!")
	"${cmd[@]}" >"$work/count.2" &
	loop_pids+=("$!")
	for p in "${loop_pids[@]}"; do wait "$p" || failed=1; done
	loop_pids=()
	read_stat
	b1=$busy t1=$total
	if [ "$failed" -ne 0 ]; then
		echo "box-floor.sh: a loop of $name failed" >&2
		exit 1
	fi
	sleep "$settle"
	read_stat
	runs=$(($(<"$work/count.1") + $(<"$work/count.2")))
	if [ "$runs" -eq 0 ] || [ "$t1" -eq "$t0" ]; then
		echo "box-floor.sh: $name: no runs or no ticks" >&2
		exit 1
	fi
	share=$(((200 * (b1 - b0) + t1 - t0) / (2 * (t1 - t0))))
	us=$(((2 * (busy - b0) * 1000000 + runs * clk) / (2 * runs * clk)))
}
ms() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }
median() {
	local -a v
	mapfile -t v < <(printf '%s\n' "$@" | sort -n)
	local n=${#v[@]}
	if ((n % 2)); then echo "${v[n / 2]}"; else echo $(((v[n / 2 - 1] + v[n / 2] + 1) / 2)); fi
}

cases=(oneshot service http-floor ns-exec-floor mounts-seccomp-floor cgroup-floor cgroup-floor-memory)
declare -A all_us=() all_share=() all_runs=()
echo "machine CPU per run, two loops at once for ${seconds} s each ($(nproc) CPUs, ${clk} ticks/s)"
for ((r = 0; r < rounds; r++)); do
	for ((k = 0; k < ${#cases[@]}; k++)); do
		name=${cases[(r + k) % ${#cases[@]}]}
		run_case "$name"
		all_us[$name]+=" $us" all_share[$name]+=" $share" all_runs[$name]+=" $runs"
		printf '  round %d  %-21s %7d runs  busy %3d%%  %9s ms/run\n' $((r + 1)) "$name" "$runs" "$share" "$(ms "$us")"
	done
done
declare -A med=()
echo "medians of $rounds rounds"
for name in "${cases[@]}"; do
	# shellcheck disable=SC2086 # the lists are numbers
	med[$name]=$(median ${all_us[$name]})
	# shellcheck disable=SC2086
	printf '  %-21s %7d runs  busy %3d%%  %9s ms/run\n' "$name" "$(median ${all_runs[$name]})" \
		"$(median ${all_share[$name]})" "$(ms "${med[$name]}")"
done
budget=$(((med[oneshot] + 1) / 3))
floor=$((${med[mounts-seccomp-floor]} + ${med[cgroup-floor-memory]} + ${med[http-floor]}))
echo "budget: the service's whole cost per run to reach 3x the one-shot's throughput: $(ms "$budget") ms (one-shot $(ms "${med[oneshot]}") / 3)"
echo "floor of a fresh box through the API (namespaces, mounts, filter, /bin/true, one memory cgroup, one HTTP round trip):" \
	"$(ms "$floor") ms (mounts-seccomp-floor $(ms "${med[mounts-seccomp-floor]}") + cgroup-floor-memory" \
	"$(ms "${med[cgroup-floor-memory]}") + http-floor $(ms "${med[http-floor]}")); budget $(ms "$budget") ms"
echo "the service measured: $(ms "${med[service]}") ms per run"

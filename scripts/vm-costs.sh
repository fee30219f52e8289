#!/bin/bash
# The machine's own costs that bound a box's (docs/PERFORMANCE.md, "Session E"):
#   both CPUs at once: an arithmetic loop and a page-fault loop, alone and
#     one on each CPU (what scripts/exec-scaling.py sees for execs);
#   wake-ups: two processes pinned to two CPUs ping-pong a byte through
#     pipes, back to back and with the other CPU left idle 2 ms between
#     trips (a halted CPU of a VM wakes through the hypervisor);
#   an init forked against one executed: vfork + exec of isolate-init
#     (scripts/build-init.sh) + exit, against fork + exit of a small static
#     process, 500 each, CPU of this process and its children;
#   namespaces: clone of a child that exits at once, 400 times, with each
#     namespace a box makes; CPU of the whole machine from /proc/stat (the
#     kernel's deferred cleanup included), per clone;
#   a seccomp filter's load ("Session F"): the default policy's
#     (seccomp/default_amd64.bpf, its notifications made "allow") against
#     plain chains of 100 and 400 compares, 60 loads each in one process;
#   a binary's size ("Session F"): vfork + exec + exit of an empty static
#     program against the same with 10 MB of text and 34 MB of bss (the
#     isolate CLI's sizes), 500 each, CPU of this process and its children.
# Root (the namespaces); two CPUs. Builds seven small C programs in a temporary
# directory with the project's C compiler (scripts/cgo-env.sh) and removes it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cgo-env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/wake.c" <<'EOF'
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static void pin(int c) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); sched_setaffinity(0, sizeof s, &s); }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
	int self = atoi(argv[1]), other = atoi(argv[2]), gap_us = atoi(argv[3]);
	int a[2], b[2];
	char c = 0;
	if (pipe(a) || pipe(b)) return 1;
	pid_t pid = fork();
	if (pid == 0) {
		close(a[1]); close(b[0]); pin(other);
		while (read(a[0], &c, 1) == 1) if (write(b[1], &c, 1) != 1) break;
		_exit(0);
	}
	close(a[0]); close(b[1]); pin(self);
	enum { N = 400 };
	double s[N];
	for (int i = 0; i < N; i++) {
		if (gap_us) usleep(gap_us);
		double t = now();
		if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) return 1;
		s[i] = now() - t;
	}
	close(a[1]); waitpid(pid, NULL, 0);
	qsort(s, N, sizeof s[0], cmp);
	printf("  CPUs %d<->%d, %4d us apart: round trip median %.3f ms, p90 %.3f\n", self, other, gap_us, s[N / 2], s[N * 9 / 10]);
	return 0;
}
EOF

cat >"$work/load.c" <<'EOF'
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
	double t = now();
	if (argc > 1 && strcmp(argv[1], "arith") == 0) {
		volatile unsigned long x = 0;
		for (unsigned long i = 0; i < 800000000UL; i++) x += i;
	} else { /* 200 x 1024 page faults on fresh anonymous memory */
		for (int r = 0; r < 200; r++) {
			char *p = mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED) return 1;
			for (int i = 0; i < (4 << 20); i += 4096) p[i] = 1;
			munmap(p, 4 << 20);
		}
	}
	printf("%.3f", now() - t);
	return 0;
}
EOF

cat >"$work/forkexec.c" <<'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>
static char data[300 << 10];
static double cpu_ms(void) {
	struct rusage s, c;
	getrusage(RUSAGE_SELF, &s);
	getrusage(RUSAGE_CHILDREN, &c);
	return (s.ru_utime.tv_sec + s.ru_stime.tv_sec + c.ru_utime.tv_sec + c.ru_stime.tv_sec) * 1e3 +
	       (s.ru_utime.tv_usec + s.ru_stime.tv_usec + c.ru_utime.tv_usec + c.ru_stime.tv_usec) / 1e3;
}
int main(int argc, char **argv) {
	const char *init = argc > 1 ? argv[1] : NULL;
	int null = open("/dev/null", O_WRONLY);
	enum { N = 500 };
	double t = cpu_ms();
	for (int i = 0; i < N; i++) {
		pid_t p;
		if (init) {
			if ((p = vfork()) == 0) {
				dup2(null, 2);
				execl(init, init, (char *)NULL);
				_exit(127);
			}
		} else if ((p = fork()) == 0) {
			for (int k = 0; k < 12; k++) /* a few pages written, as an init writes */
				data[k * 4096] = 1;
			_exit(0);
		}
		waitpid(p, NULL, 0);
	}
	printf("%.3f", (cpu_ms() - t) / N);
	return 0;
}
EOF

cat >"$work/ns.c" <<'EOF'
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/wait.h>
static unsigned long long busy_ticks(void) {
	unsigned long long v[8] = {0};
	FILE *f = fopen("/proc/stat", "r");
	if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8) exit(1);
	fclose(f);
	return v[0] + v[1] + v[2] + v[5] + v[6]; /* user nice system irq softirq */
}
static int tmpfs_mounts;
static char stack[1 << 16];
static int child(void *arg) {
	(void)arg;
	for (int i = 0; i < tmpfs_mounts; i++)
		if (mount("tmpfs", "/tmp", "tmpfs", 0, "size=1m")) return 1;
	return 0;
}
int main(int argc, char **argv) {
	int flags = (int)strtol(argv[1], NULL, 0);
	tmpfs_mounts = atoi(argv[2]);
	enum { N = 400 };
	unsigned long long t0 = busy_ticks();
	for (int i = 0; i < N; i++) {
		pid_t p = clone(child, stack + sizeof stack, flags | SIGCHLD, NULL);
		if (p < 0) { perror("clone"); return 1; }
		int ws;
		waitpid(p, &ws, 0);
		if (!WIFEXITED(ws) || WEXITSTATUS(ws)) { fprintf(stderr, "child failed\n"); return 1; }
	}
	usleep(300000); /* the deferred cleanup (network namespaces) */
	unsigned long long t1 = busy_ticks();
	printf("%.3f\n", (t1 - t0) * 1000.0 / sysconf(_SC_CLK_TCK) / N);
	return 0;
}
EOF

cat >"$work/filter.c" <<'EOF'
#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
/* filter FILE | filter N: mean ms of 60 loads of FILE's filter, or of a
 * chain of N-2 compares on the syscall number ending in "allow". */
int main(int argc, char **argv) {
	static struct sock_filter f[4096];
	size_t n = 0;
	FILE *fh = fopen(argv[1], "rb");
	if (fh) {
		n = fread(f, sizeof f[0], 4096, fh);
		for (size_t i = 0; i < n; i++) /* SECCOMP_RET_USER_NOTIF needs a listener */
			if (f[i].code == (BPF_RET | BPF_K) && f[i].k == 0x7fc00000U)
				f[i].k = SECCOMP_RET_ALLOW;
	} else {
		n = atoi(argv[1]);
		f[0] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0);
		for (size_t i = 1; i < n - 1; i++)
			f[i] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 100000 + i, 0, 0);
		f[n - 1] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	}
	struct sock_fprog fp = {.len = n, .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return 1;
	double sum = 0;
	for (int r = 0; r < 60; r++) {
		double t0 = now();
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fp) < 0)
			return 1;
		sum += now() - t0;
	}
	printf("%zu instructions: %.3f ms a load\n", n, sum / 60);
	return 0;
}
EOF

printf 'int main(void) { return 0; }\n' >"$work/empty.c"
cat >"$work/padded.c" <<'EOF'
static char bss[34 << 20];
__attribute__((used)) static const char text[10 << 20] = {1};
int main(int argc, char **argv) { return bss[argc] + text[argc * 4096]; }
EOF

$CC -O2 -static -o "$work/empty" "$work/empty.c"
$CC -O2 -static -o "$work/padded" "$work/padded.c"
$CC -O2 $CGO_CFLAGS -static -o "$work/filter" "$work/filter.c"
$CC -O2 -static -o "$work/wake" "$work/wake.c"
$CC -O2 -static -o "$work/ns" "$work/ns.c"
$CC -O1 -static -o "$work/load" "$work/load.c"
$CC -O2 -static -o "$work/forkexec" "$work/forkexec.c"
cpus=($(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])'))
echo "both CPUs at once (seconds: alone; then one on each CPU at once)"
for kind in arith faults; do
	alone=$(taskset -c "${cpus[0]}" "$work/load" $kind)
	taskset -c "${cpus[0]}" "$work/load" $kind >"$work/a" &
	taskset -c "${cpus[1]}" "$work/load" $kind >"$work/b"
	wait
	printf '  %-7s %s; %s and %s\n' "$kind" "$alone" "$(cat "$work/a")" "$(cat "$work/b")"
done
if [ -x isolate/initbin/isolate-init ]; then
	echo "an init executed against one forked (CPU ms each, 500 each, twice)"
	for round in 1 2; do
		printf '  vfork + exec of isolate-init + exit %s; fork + exit %s\n' \
			"$("$work/forkexec" isolate/initbin/isolate-init)" "$("$work/forkexec")"
	done
else
	echo "(no isolate/initbin/isolate-init: scripts/build-init.sh builds it)"
fi
echo "a binary's size: vfork + exec + exit (CPU ms each, 500 each, twice)"
for round in 1 2; do
	printf '  empty static program %s; with 10 MB of text and 34 MB of bss %s\n' \
		"$("$work/forkexec" "$work/empty")" "$("$work/forkexec" "$work/padded")"
done
echo "seccomp filter loads (60 in one process each)"
for f in seccomp/default_amd64.bpf 100 400; do
	printf '  %-28s %s\n' "$f" "$("$work/filter" "$f")"
done
echo "wake-ups (400 round trips each)"
"$work/wake" "${cpus[0]}" "${cpus[0]}" 0
"$work/wake" "${cpus[0]}" "${cpus[1]}" 0
"$work/wake" "${cpus[0]}" "${cpus[0]}" 2000
"$work/wake" "${cpus[0]}" "${cpus[1]}" 2000
echo "namespaces: machine CPU ms per clone+exit (400 clones; median of 3 interleaved rounds; others' work counts too)"
cases=("no new namespace:0:0" "network:0x40000000:0" "mount:0x20000:0" "mount + 4 tmpfs mounts:0x20000:4"
	"user:0x10000000:0" "PID:0x20000000:0" "IPC:0x08000000:0" "UTS:0x04000000:0")
for round in 1 2 3; do
	for c in "${cases[@]}"; do
		IFS=: read -r name flags mounts <<<"$c"
		echo "$name:$("$work/ns" "$flags" "$mounts")"
	done
done | python3 -c '
import statistics, sys
runs = {}
for line in sys.stdin:
    name, v = line.rstrip().rsplit(":", 1)
    runs.setdefault(name, []).append(float(v))
base = statistics.median(runs["no new namespace"])
for name, vs in runs.items():
    m = statistics.median(vs)
    extra = "" if name == "no new namespace" else f"  ({m - base:+.3f})"
    print(f"  {name:28s} {m:6.3f}{extra}")
'

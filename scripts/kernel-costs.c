/*
 * kernel-costs: what kernel operations on a run's path cost on this machine,
 * the evidence behind figures in docs/PERFORMANCE.md and README.md.
 *
 *   kernel-costs ns              unshare(2) of a new user namespace with each
 *                                other namespace a box gets, one at a time
 *   kernel-costs cgroup F...     a fresh single-threaded child writing "0" to
 *                                each cgroup file F in turn (the first
 *                                cgroup.procs write pays for the thread-group
 *                                lock; v1 "tasks" files move one thread)
 *   kernel-costs faults          a first touch of an anonymous page (a page
 *                                fault) against populating pages in one
 *                                madvise(MADV_POPULATE_WRITE); a system call
 *                                (getppid); fork+exec+wait of /bin/true
 *                                against vfork+exec+wait, from a process
 *                                that has written 256 KiB
 *
 * Medians of 200 runs, microseconds. Run as root; scripts/kernel-costs.sh
 * builds it and makes (and removes) the cgroups it writes to.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUNS 200

static long long now_ns(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
	long long x = *(const long long *)a, y = *(const long long *)b;
	return x < y ? -1 : x > y;
}

static double median_us(long long *v, int n) {
	qsort(v, n, sizeof *v, cmp);
	return v[n / 2] / 1000.0;
}

/* child_times forks RUNS children; each runs fn and sends back n timings. */
static void child_times(int n, void (*fn)(long long *, void *), void *arg, long long (*out)[RUNS]) {
	for (int r = 0; r < RUNS; r++) {
		int p[2];
		if (pipe(p) < 0)
			exit(1);
		pid_t c = fork();
		if (c == 0) {
			long long t[16] = {0};
			fn(t, arg);
			if (write(p[1], t, sizeof t) < 0)
				_exit(1);
			_exit(0);
		}
		long long t[16];
		if (read(p[0], t, sizeof t) != sizeof t)
			exit(1);
		waitpid(c, NULL, 0);
		close(p[0]), close(p[1]);
		for (int i = 0; i < n; i++)
			out[i][r] = t[i];
	}
}

static void do_unshare(long long *t, void *arg) {
	int flags = *(int *)arg;
	long long a = now_ns();
	if (unshare(flags) < 0) {
		perror("unshare");
		_exit(1);
	}
	t[0] = now_ns() - a;
}

struct files { int n; int fd[16]; };

static void do_join(long long *t, void *arg) {
	struct files *f = arg;
	for (int i = 0; i < f->n; i++) {
		long long a = now_ns();
		if (write(f->fd[i], "0", 1) != 1) {
			perror("write");
			_exit(1);
		}
		t[i] = now_ns() - a;
	}
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* faults: what touching memory and starting programs cost, per unit. */
static int faults(void) {
	const size_t pages = 1024, ps = 4096;
	long long v[RUNS];
	for (int r = 0; r < RUNS / 10; r++) {
		char *m = mmap(NULL, pages * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		long long a = now_ns();
		for (size_t i = 0; i < pages; i++)
			m[i * ps] = 1;
		v[r] = (now_ns() - a) / (long long)pages;
		munmap(m, pages * ps);
	}
	printf("page fault (first write of an anonymous page)   %7.2f us\n", median_us(v, RUNS / 10));
	for (int r = 0; r < RUNS / 10; r++) {
		char *m = mmap(NULL, pages * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		long long a = now_ns();
		if (madvise(m, pages * ps, MADV_POPULATE_WRITE) < 0) {
			perror("madvise");
			return 1;
		}
		v[r] = (now_ns() - a) / (long long)pages;
		munmap(m, pages * ps);
	}
	printf("page populated by MADV_POPULATE_WRITE, per page %7.2f us\n", median_us(v, RUNS / 10));
	for (int r = 0; r < RUNS; r++) {
		long long a = now_ns();
		for (int i = 0; i < 100; i++)
			syscall(SYS_getppid);
		v[r] = (now_ns() - a) / 100;
	}
	printf("system call (getppid)                           %7.2f us\n", median_us(v, RUNS));
	static char written[256 << 10];
	memset(written, 1, sizeof written);
	char *argv[] = {"/bin/true", NULL}, *envp[] = {NULL};
	for (int mode = 0; mode < 2; mode++) {
		for (int r = 0; r < RUNS; r++) {
			long long a = now_ns();
			pid_t c = mode ? vfork() : fork();
			if (c == 0) {
				execve(argv[0], argv, envp);
				_exit(127);
			}
			waitpid(c, NULL, 0);
			written[(r * 4096) % sizeof written]++; /* the parent writes on, as init does */
			v[r] = now_ns() - a;
		}
		printf("%-5s + exec + wait of /bin/true                %7.1f us\n", mode ? "vfork" : "fork", median_us(v, RUNS));
	}
	return 0;
}

int main(int argc, char **argv) {
	static long long v[16][RUNS];
	if (argc >= 2 && strcmp(argv[1], "ns") == 0) {
		static const struct { const char *name; int flags; } cases[] = {
			{"user", CLONE_NEWUSER},
			{"user+mount", CLONE_NEWUSER | CLONE_NEWNS},
			{"user+pid", CLONE_NEWUSER | CLONE_NEWPID},
			{"user+ipc", CLONE_NEWUSER | CLONE_NEWIPC},
			{"user+uts", CLONE_NEWUSER | CLONE_NEWUTS},
			{"user+net", CLONE_NEWUSER | CLONE_NEWNET},
			{"all six (a box's)", CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET},
		};
		for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
			int flags = cases[i].flags;
			child_times(1, do_unshare, &flags, v);
			printf("unshare %-18s %7.1f us\n", cases[i].name, median_us(v[0], RUNS));
		}
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "cgroup") == 0 && argc - 2 <= 16) {
		struct files f = {.n = argc - 2};
		for (int i = 0; i < f.n; i++)
			if ((f.fd[i] = open(argv[i + 2], O_WRONLY | O_CLOEXEC)) < 0) {
				perror(argv[i + 2]);
				return 1;
			}
		child_times(f.n, do_join, &f, v);
		for (int i = 0; i < f.n; i++)
			printf("write \"0\" #%d %-60s %7.1f us\n", i + 1, argv[i + 2], median_us(v[i], RUNS));
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "faults") == 0)
		return faults();
	fprintf(stderr, "usage: kernel-costs ns | kernel-costs cgroup FILE... | kernel-costs faults\n");
	return 2;
}

/* probe: one test program with many behaviours, chosen by argv[1]. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

static double cputime(void) {
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void *spin_thread(void *arg) {
	double secs = *(double *)arg;
	struct timespec t0, t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	for (;;) {
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
		if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 >= secs) break;
	}
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 2) return 100;
	const char *m = argv[1];
	if (!strcmp(m, "spin")) { /* spin SECONDS: burn CPU, print own CPU time */
		double s = atof(argv[2]);
		while (cputime() < s) ;
		printf("%.6f\n", cputime());
		return 0;
	}
	if (!strcmp(m, "forever")) { for (;;) ; }
	if (!strcmp(m, "threads")) { /* threads N SECONDS: N threads spinning */
		int n = atoi(argv[2]);
		double s = atof(argv[3]);
		pthread_t th[64];
		for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, spin_thread, &s);
		for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
		struct rusage ru;
		getrusage(RUSAGE_SELF, &ru);
		printf("%.6f\n", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
		return 0;
	}
	if (!strcmp(m, "touch")) { /* touch MIB: allocate and touch MIB mebibytes */
		size_t n = (size_t)atol(argv[2]) << 20;
		char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) return 3;
		for (size_t i = 0; i < n; i += 4096) p[i] = 1;
		return 0;
	}
	if (!strcmp(m, "abort")) abort();
	if (!strcmp(m, "kill9")) { kill(getpid(), SIGKILL); pause(); }
	if (!strcmp(m, "exit")) return atoi(argv[2]);
	if (!strcmp(m, "sleep")) { sleep(atoi(argv[2])); return 0; }
	if (!strcmp(m, "forkbomb")) { /* forkbomb: fork until refused, report count */
		int n = 0;
		for (int i = 0; i < 10000; i++) {
			pid_t p = fork();
			if (p == 0) { pause(); _exit(0); }
			if (p < 0) break;
			n++;
		}
		printf("%d\n", n);
		return 0;
	}
	if (!strcmp(m, "daemon")) { /* setsid + double fork: a detached sleeper */
		if (fork() == 0) {
			setsid();
			if (fork() == 0) { close(0); close(1); close(2); sleep(1000); _exit(0); }
			_exit(0);
		}
		wait(NULL);
		return 0;
	}
	if (!strcmp(m, "write")) { /* write PATH KIB */
		int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0) { perror("open"); return 3; }
		char buf[1024];
		memset(buf, 'x', sizeof buf);
		for (int i = 0; i < atoi(argv[3]); i++)
			if (write(fd, buf, sizeof buf) != sizeof buf) { perror("write"); return 4; }
		return 0;
	}
	if (!strcmp(m, "print")) { /* print BYTES: to stdout */
		long n = atol(argv[2]);
		char buf[4096];
		memset(buf, 'y', sizeof buf);
		while (n > 0) { long k = n < 4096 ? n : 4096; if (write(1, buf, k) < 0) return 3; n -= k; }
		return 0;
	}
	if (!strcmp(m, "nofile")) { /* open files until refused */
		int n = 0;
		while (open("/dev/null", O_RDONLY) >= 0) n++;
		printf("%d\n", n + 3);
		return 0;
	}
	if (!strcmp(m, "rlimit")) {
		struct rlimit r;
		getrlimit(RLIMIT_STACK, &r);
		printf("stack %lu\n", (unsigned long)r.rlim_cur);
		getrlimit(RLIMIT_FSIZE, &r);
		printf("fsize %lu\n", (unsigned long)r.rlim_cur);
		getrlimit(RLIMIT_NOFILE, &r);
		printf("nofile %lu\n", (unsigned long)r.rlim_cur);
		return 0;
	}
	if (!strcmp(m, "mount")) {
		if (mount("tmpfs", "/tmp", "tmpfs", 0, "") == 0) return 0;
		printf("%s\n", strerror(errno));
		return 1;
	}
	if (!strcmp(m, "ptrace")) {
		if (ptrace(PTRACE_ATTACH, 1, 0, 0) == 0) return 0;
		printf("%s\n", strerror(errno));
		return 1;
	}
	if (!strcmp(m, "unshare")) {
		if (unshare(CLONE_NEWUSER) == 0) return 0;
		printf("%s\n", strerror(errno));
		return 1;
	}
	if (!strcmp(m, "connect")) { /* connect PORT on 127.0.0.1 */
		int s = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) { printf("connected\n"); return 0; }
		printf("%s\n", strerror(errno));
		return 1;
	}
	if (!strcmp(m, "fds")) { /* list open descriptors */
		DIR *d = opendir("/proc/self/fd");
		struct dirent *e;
		int self = dirfd(d);
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.' || atoi(e->d_name) == self) continue;
			printf("%s ", e->d_name);
		}
		printf("\n");
		return 0;
	}
	if (!strcmp(m, "pids")) { /* count visible processes */
		DIR *d = opendir("/proc");
		struct dirent *e;
		int n = 0;
		while ((e = readdir(d))) if (e->d_name[0] >= '0' && e->d_name[0] <= '9') n++;
		printf("%d %d\n", n, getpid());
		return 0;
	}
	return 100;
}

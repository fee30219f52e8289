/*
 * init's two channels to the supervisor: the plan it reads (records of
 * typed fields, protocol.h) and the status messages it writes (one JSON
 * line each, described by Message in protocol.go).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "init.h"

/* ---- memory --------------------------------------------------------- */

/* Init's allocations (the plan's records, the status messages) come from a
 * static arena, end to end: malloc spread them over a dozen pages of its
 * size classes, and on a VM the first touch of a page costs 20-60 us (a
 * box's init took ~25 page faults, half of them in malloc's pages).
 * Nothing is given back: init lives for one box. What does not fit (a
 * huge environment) comes from malloc, and so does everything outside a
 * box's init (this code is in the Go binaries too, where any thread may
 * call it). */
static char arena[256 << 10] __attribute__((aligned(16)));
static size_t arena_used;
int init_arena_on;

static int in_arena(const void *p) { return (const char *)p >= arena && (const char *)p < arena + sizeof arena; }

/* init_alloc returns n bytes, zeroed. */
void *init_alloc(size_t n) {
	size_t k = (n + 15) & ~(size_t)15;
	if (init_arena_on && k >= n && k <= sizeof arena - arena_used) {
		void *p = arena + arena_used; /* never handed out before: zero */
		arena_used += k;
		return p;
	}
	return calloc(1, n ? n : 1);
}

/* init_grow moves the first n bytes of p (NULL: none) to n2 bytes. */
static void *init_grow(void *p, size_t n, size_t n2) {
	if (p && !in_arena(p))
		return realloc(p, n2);
	void *q = init_alloc(n2);
	if (q && n)
		memcpy(q, p, n);
	return q;
}

void init_free(void *p) {
	if (!in_arena(p))
		free(p);
}

void init_arena_warm(size_t n) {
	for (size_t off = arena_used; off < arena_used + n && off < sizeof arena; off += 4096)
		((volatile char *)arena)[off] = 0;
}

/* ---- the plan ------------------------------------------------------- */

static const struct {
	const char *name;
	int ints, strs;
} ops[ISOLATE_OP_COUNT] = {
#define ISOLATE_OP_ROW(name, text, ints, strs) [ISOLATE_OP_##name] = {text, ints, strs},
	ISOLATE_OPS(ISOLATE_OP_ROW)
#undef ISOLATE_OP_ROW
};

const char *init_op_name(enum isolate_op type) {
	return type > ISOLATE_OP_NONE && type < ISOLATE_OP_COUNT ? ops[type].name : "?";
}

int init_add_fd(int **fds, size_t *n, size_t *cap, int fd) {
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 8;
		int *p = init_grow(*fds, *n * sizeof *p, c * sizeof *p);
		if (!p)
			return errno = ENOMEM, -1;
		*fds = p, *cap = c;
	}
	(*fds)[(*n)++] = fd;
	return 0;
}

int init_place_fd(struct plan_reader *r, int target) {
	if (r->nfds == 0 || target < ISOLATE_FD_EXTRA || target >= INIT_FD_HIGH)
		return errno = EBADF, -1;
	int fd = r->fds[0];
	if (fd != target) {
		/* A received descriptor still to be placed that holds the number
		 * moves away first. */
		for (size_t i = 1; i < r->nfds; i++)
			if (r->fds[i] == target && (r->fds[i] = fcntl(target, F_DUPFD_CLOEXEC, INIT_FD_HIGH)) < 0)
				return -1;
		if (dup3(fd, target, O_CLOEXEC) < 0)
			return -1;
		close(fd);
	}
	/* The command part's indexes count from its own descriptors. */
	memmove(r->fds, r->fds + 1, (r->nfds - 1) * sizeof *r->fds);
	r->nfds--;
	return 0;
}

/* fill receives more of the plan, taking any descriptors attached to it.
 * The plan arrives in large reads: the supervisor sends nothing after a
 * part until init answers, so reading ahead takes nothing that is not
 * plan. */
static int fill(struct plan_reader *r) {
	if (r->fd < 0)
		return r->why = "truncated record", errno = EPIPE, -1;
	if (r->pos == r->len)
		r->pos = r->len = 0;
	if (r->len == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64 << 10;
		char *b = init_grow(r->buf, r->len, cap);
		if (!b)
			return errno = ENOMEM, -1;
		r->buf = b, r->cap = cap;
	}
	/* Room for more descriptors than the plan ever sends: MSG_CTRUNC
	 * below refuses a plan that sent more, rather than dropping them. */
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(64 * sizeof(int))];
	} cm;
	struct iovec iov = {.iov_base = r->buf + r->len, .iov_len = r->cap - r->len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
	ssize_t n;
	while ((n = recvmsg(r->fd, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (n < 0)
		return -1;
	if (n == 0)
		return errno = EPIPE, -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
			if (init_add_fd(&r->fds, &r->nfds, &r->capfds, fd) < 0)
				return -1;
		}
	}
	if (mh.msg_flags & MSG_CTRUNC)
		return r->why = "too many descriptors", errno = EMFILE, -1;
	r->len += n;
	return 0;
}

/* take copies the next n bytes of the plan to p. */
static int take(struct plan_reader *r, void *p, size_t n) {
	char *out = p;
	while (n > 0) {
		if (r->pos == r->len && fill(r) < 0)
			return -1;
		size_t k = r->len - r->pos < n ? r->len - r->pos : n;
		memcpy(out, r->buf + r->pos, k);
		r->pos += k, out += k, n -= k;
	}
	return 0;
}

/* refuse marks a malformed record. */
static int refuse(struct plan_reader *r, const char *why) {
	r->why = why;
	errno = EINVAL;
	return -1;
}

/* take_str reads one length-prefixed string, NUL-terminated. */
static int take_str(struct plan_reader *r, char **s, uint32_t *len) {
	if (take(r, len, 4) < 0)
		return -1;
	if (*len > ISOLATE_MAX_STRING)
		return refuse(r, "string too long");
	if (!(*s = init_alloc(*len + 1)))
		return errno = ENOMEM, -1;
	if (take(r, *s, *len) < 0)
		return -1;
	(*s)[*len] = 0;
	return 0;
}

int init_read_op(struct plan_reader *r, struct op *op) {
	uint32_t head[3];
	memset(op, 0, sizeof *op);
	r->why = NULL;
	if (take(r, head, sizeof head) < 0)
		return -1;
	if (head[0] <= ISOLATE_OP_NONE || head[0] >= ISOLATE_OP_COUNT)
		return refuse(r, "unknown operation");
	op->type = head[0], op->nints = head[1], op->nstrs = head[2];
	int want_ints = ops[op->type].ints, want_strs = ops[op->type].strs;
	if (op->nints != (uint32_t)want_ints || (want_strs != ISOLATE_ANY && op->nstrs != (uint32_t)want_strs))
		return refuse(r, "wrong number of fields");
	if (op->nstrs > ISOLATE_MAX_FIELDS)
		return refuse(r, "too many fields");
	char *step;
	uint32_t steplen;
	if (take_str(r, &step, &steplen) < 0)
		return -1;
	op->step = step;
	op->ints = init_alloc((op->nints + 1) * sizeof *op->ints);
	op->strs = init_alloc((op->nstrs + 1) * sizeof *op->strs); /* NULL-terminated: argv, env */
	op->len = init_alloc((op->nstrs + 1) * sizeof *op->len);
	if (!op->ints || !op->strs || !op->len)
		return errno = ENOMEM, -1;
	if (op->nints && take(r, op->ints, op->nints * sizeof *op->ints) < 0)
		return -1;
	for (uint32_t i = 0; i < op->nstrs; i++)
		if (take_str(r, &op->strs[i], &op->len[i]) < 0)
			return -1;
	return 0;
}

/* ---- status messages ------------------------------------------------ */

static char *out;
static size_t outlen, outcap;

void init_put(const char *s) {
	size_t n = strlen(s);
	if (outlen + n + 2 > outcap) {
		size_t cap = outcap ? outcap : 4096;
		while (cap < outlen + n + 2)
			cap *= 2;
		char *b = init_grow(out, outlen, cap);
		if (!b)
			_exit(1); /* nothing left to say it with */
		out = b, outcap = cap;
	}
	memcpy(out + outlen, s, n);
	outlen += n;
}

/* put_json puts s as a JSON string. */
static void put_json(const char *s) {
	char buf[8];
	init_put("\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			buf[0] = '\\', buf[1] = c, buf[2] = 0;
		} else if (c < 0x20) {
			snprintf(buf, sizeof buf, "\\u%04x", c);
		} else {
			buf[0] = c, buf[1] = 0;
		}
		init_put(buf);
	}
	init_put("\"");
}

void init_put_str(const char *key, const char *s) {
	init_put(",\"");
	init_put(key);
	init_put("\":");
	put_json(s);
}

void init_put_num(const char *key, long long v) {
	char buf[64];
	snprintf(buf, sizeof buf, ",\"%s\":%lld", key, v);
	init_put(buf);
}

void init_flush(void) {
	init_put("\n");
	init_send();
}

void init_send(void) {
	size_t off = 0;
	while (off < outlen) {
		ssize_t n = write(ISOLATE_FD_STATUS, out + off, outlen - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += n;
	}
	outlen = 0;
}

static void __attribute__((noreturn)) send_error(const char *step, const char *op, const char *path, int err) {
	init_put("{\"type\":\"" ISOLATE_MSG_ERROR "\"");
	init_put_str("step", step);
	if (op)
		init_put_str("op", op);
	if (path)
		init_put_str("path", path);
	init_put_str("err", strerror(err));
	init_put_num("errno", err);
	init_put("}");
	init_flush();
	_exit(1);
}

void init_put_exited(uint64_t id, int ws, int64_t wall, const struct rusage *ru, const char *step, int err) {
	init_put("{\"type\":\"" ISOLATE_MSG_EXITED "\"");
	if (id)
		init_put_num("id", (long long)id);
	init_put_num("pid", init_box_host_pid);
	init_put_num("ws", ws);
	init_put_num("wall_ns", wall);
	init_put_num("utime_ns", (long long)ru->ru_utime.tv_sec * 1000000000 + ru->ru_utime.tv_usec * 1000);
	init_put_num("stime_ns", (long long)ru->ru_stime.tv_sec * 1000000000 + ru->ru_stime.tv_usec * 1000);
	init_put_num("maxrss_kb", ru->ru_maxrss);
	init_put_num("nvcsw", ru->ru_nvcsw);
	init_put_num("nivcsw", ru->ru_nivcsw);
	if (step) {
		/* It could not be started: exec_err as a shell would say it. */
		char text[512];
		snprintf(text, sizeof text, "%s: %s", strcmp(step, "execve") == 0 ? init_prog.argv[0] : step, strerror(err));
		init_put_str("exec_err", text);
		init_put_str("step", step);
		init_put_num("errno", err);
	}
	init_put("}");
	init_flush();
}

void init_fail(const char *step, int err) { send_error(step, NULL, NULL, err); }

void init_fail_op(const struct op *op, const char *path, int err) {
	send_error(op->step, init_op_name(op->type), path, err);
}

void init_fail_misplaced(const struct op *op, const char *part) {
	char step[128];
	snprintf(step, sizeof step, "decode plan: %s is not an operation of the %s part", init_op_name(op->type), part);
	send_error(step, NULL, NULL, EINVAL);
}

/* ---- stage timers --------------------------------------------------- */

static const char *stage_names[STAGE_COUNT] = {
    [STAGE_NAMESPACES] = "init-namespaces", [STAGE_MAPS] = "init-maps", [STAGE_PLAN] = "init-plan",
    [STAGE_SETUP] = "init-setup",           [STAGE_EXEC] = "init-exec",
};
static int64_t stage_ns[STAGE_COUNT], stage_last;
static unsigned char stage_done[STAGE_COUNT];

/* init_now_ns reads the clock by system call, not through the vDSO: the
 * C library's first vDSO call parses its symbol table, and the vDSO's
 * code and data pages fault in one by one (four faults of 20-60 us each on
 * a VM, for a dozen reads that cost a microsecond or two each this way). */
int64_t init_now_ns(void) {
	struct timespec t;
	syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

void init_mark_start(void) { stage_last = init_now_ns(); }

void init_mark(enum init_stage s) {
	int64_t t = init_now_ns();
	stage_ns[s] = t - stage_last;
	stage_done[s] = 1;
	stage_last = t;
}

void init_report_stages(void) {
	init_put(",\"stages\":{");
	for (int i = 0, first = 1; i < STAGE_COUNT; i++) {
		if (!stage_done[i])
			continue;
		char buf[96];
		snprintf(buf, sizeof buf, "%s\"%s\":%lld", first ? "" : ",", stage_names[i], (long long)stage_ns[i]);
		init_put(buf);
		first = 0;
	}
	init_put("}");
}

/* ---- the protocol test ---------------------------------------------- */

static void render_str(FILE *f, const char *s, size_t len) {
	fputc('"', f);
	for (size_t j = 0; j < len; j++) {
		unsigned char c = s[j];
		if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* isolate_render_plan decodes a plan with the reader above and renders
 * each record as a line of text (protocol_test.go compares it with what
 * was encoded): the op's name, the step, then each integer and each
 * string, strings quoted with every byte outside printable ASCII (and "
 * and \) as \xNN. A malformed record ends the text with "error: why".
 * The caller frees the result. */
char *isolate_render_plan(const char *buf, size_t n, size_t *outn) {
	struct plan_reader r = {.fd = -1, .buf = malloc(n + 1), .cap = n + 1, .len = n};
	memcpy(r.buf, buf, n);
	char *text = NULL;
	FILE *f = open_memstream(&text, outn);
	struct op op;
	while (r.pos < r.len) {
		if (init_read_op(&r, &op) < 0) {
			fprintf(f, "error: %s\n", r.why ? r.why : strerror(errno));
			break;
		}
		fprintf(f, "%s step=", init_op_name(op.type));
		render_str(f, op.step, strlen(op.step));
		for (uint32_t i = 0; i < op.nints; i++)
			fprintf(f, " %llu", (unsigned long long)op.ints[i]);
		for (uint32_t i = 0; i < op.nstrs; i++) {
			fputc(' ', f);
			render_str(f, op.strs[i], op.len[i]);
		}
		fputc('\n', f);
		for (uint32_t i = 0; i < op.nstrs; i++)
			init_free(op.strs[i]);
		init_free((void *)op.step), init_free(op.ints), init_free(op.strs), init_free(op.len);
	}
	fclose(f);
	free(r.buf);
	return text;
}

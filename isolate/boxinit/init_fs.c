/*
 * The box part of the plan: PID 1, in its new namespaces, builds the box
 * (host name, loopback, the file system rootfs.Plan describes, pivot_root)
 * one operation at a time, as the records arrive.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "init.h"

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

struct isolate_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

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

/* touch creates an empty file at path, and any missing parents. */
static int touch(char *path, mode_t mode) {
	char *slash = strrchr(path, '/');
	if (slash && slash != path) {
		*slash = 0;
		int rc = mkdir_p(path, 0755);
		*slash = '/';
		if (rc < 0)
			return -1;
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
	return fd < 0 ? -1 : close(fd);
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

/* listen_proxy listens on the box's 127.0.0.1:port (loopback is up) at
 * ISOLATE_FD_PROXY, close-on-exec: no program of the box inherits it. */
static int listen_proxy(int port) {
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int rc = bind(s, (struct sockaddr *)&a, sizeof a);
	if (rc == 0)
		rc = listen(s, 128);
	if (rc == 0 && dup3(s, ISOLATE_FD_PROXY, O_CLOEXEC) < 0)
		rc = -1;
	int e = errno;
	close(s);
	errno = e;
	return rc;
}

static int write_sysctl(const char *path, const char *value) {
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (write(fd, value, strlen(value)) < 0) {
		int e = errno;
		close(fd);
		return errno = e, -1;
	}
	return close(fd);
}

/* pivot makes dir the root. pivot_root(".", ".") stacks the old root
 * under the new one; detaching "." then drops it without a put_old
 * directory. */
static int pivot(const char *dir) {
	if (chdir(dir) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0)
		return -1;
	return chdir("/");
}

#define OPT(s) ((s)[0] ? (s) : NULL)

/* init_box_op carries out one operation of the box part (the reader has
 * checked its fields' numbers against protocol.h). A failure ends init,
 * naming the op and its path. *announce is set at BOX_END. */
int init_box_op(struct op *op, int *announce) {
	uint64_t *i = op->ints;
	char **s = op->strs;
	int rc;
	const char *path = NULL;
	switch (op->type) {
	case ISOLATE_OP_HOSTNAME:
		rc = sethostname(s[0], op->len[0]);
		break;
	case ISOLATE_OP_LOOPBACK:
		rc = loopback_up();
		break;
	case ISOLATE_OP_LISTEN:
		rc = listen_proxy((int)i[0]);
		break;
	case ISOLATE_OP_SYSCTL:
		rc = write_sysctl(path = s[0], s[1]);
		break;
	case ISOLATE_OP_PRIVATE:
		rc = mount("", path = "/", NULL, MS_REC | MS_PRIVATE, NULL);
		break;
	case ISOLATE_OP_MOUNT:
		rc = mount(s[0], path = s[1], OPT(s[2]), i[0], OPT(s[3]));
		break;
	case ISOLATE_OP_MOVE_MOUNT:
		/* A bind's source as the supervisor opened it, never looked up
		 * by its path again (no symlink on the target followed). */
		rc = syscall(SYS_move_mount, (int)i[0], "", AT_FDCWD, path = s[0], MOVE_MOUNT_F_EMPTY_PATH);
		if (rc == 0)
			close((int)i[0]);
		break;
	case ISOLATE_OP_SETATTR: {
		struct isolate_mount_attr a = {.attr_set = i[0]};
		rc = syscall(SYS_mount_setattr, AT_FDCWD, path = s[0], i[1] ? AT_RECURSIVE : 0, &a, sizeof a);
		break;
	}
	case ISOLATE_OP_MKDIR:
		rc = mkdir_p(s[0], i[0]);
		path = s[0];
		break;
	case ISOLATE_OP_TOUCH:
		rc = touch(s[0], i[0]);
		path = s[0];
		break;
	case ISOLATE_OP_SYMLINK:
		rc = symlink(s[0], path = s[1]);
		break;
	case ISOLATE_OP_WRITE:
		rc = write_file(path = s[0], s[1], op->len[1], i[0]);
		break;
	case ISOLATE_OP_REMOUNT_RO:
		rc = mount("", path = s[0], NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
		break;
	case ISOLATE_OP_PIVOT:
		rc = pivot(path = s[0]);
		break;
	case ISOLATE_OP_PREPARE:
		init_prepare_filter(op);
		return 0;
	case ISOLATE_OP_SESSION:
		init_session = 1;
		return 0;
	case ISOLATE_OP_BOX_END:
		*announce = i[0] != 0;
		return 1;
	default:
		init_fail_misplaced(op, "box");
	}
	if (rc < 0)
		init_fail_op(op, path, errno);
	return 0;
}

/* ---- handing directories over (HAND_OVER) --------------------------- */

#ifndef STATX_TYPE
#define STATX_TYPE 0x0001U
#endif
#ifndef STATX_MNT_ID
#define STATX_MNT_ID 0x1000U
#endif
#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif

/* The kernel's struct statx, the fields used here (musl before 1.2.5 has
 * no statx). */
struct hand_statx {
	uint32_t mask, blksize;
	uint64_t attributes;
	uint32_t nlink, uid, gid;
	uint16_t mode, pad1;
	uint64_t ino, size, blocks, attributes_mask;
	uint64_t times[8];
	uint32_t rdev_major, rdev_minor, dev_major, dev_minor;
	uint64_t mnt_id;
	uint64_t spare[13];
};

/* The directory depth a tree is walked to: deeper, the hand-over fails
 * (a program can make a tree as deep as it likes). */
#define HAND_MAX_DEPTH 4096
#define ISOLATE_STR2(x) #x
#define ISOLATE_STR(x) ISOLATE_STR2(x)

/* Per level, where its listing goes on once the level below is done. */
static int64_t hand_off[HAND_MAX_DEPTH];
static char hand_buf[16 << 10];
static int hand_too_deep;

struct hand_dirent {
	uint64_t ino;
	int64_t off;
	unsigned short reclen;
	unsigned char type;
	char name[];
};

/* entry_of tells name's type and the mount it is on (name "": dir
 * itself), never following a link. */
static int entry_of(int dir, const char *name, uint64_t *mnt, mode_t *mode) {
	struct hand_statx stx;
	int flags = AT_SYMLINK_NOFOLLOW | (*name ? 0 : AT_EMPTY_PATH);
	if (syscall(SYS_statx, dir, name, flags, STATX_TYPE | STATX_MNT_ID, &stx) < 0)
		return -1;
	*mode = stx.mode;
	/* (Before 5.8 no mount id: the device tells at least another file
	 * system's mount.) */
	*mnt = stx.mask & STATX_MNT_ID ? stx.mnt_id : (1ULL << 63) | ((uint64_t)stx.dev_major << 32) | stx.dev_minor;
	return 0;
}

/* hand_tree gives path and every file below it on its mount to uid:gid.
 * Nothing runs in the box meanwhile (before the program, or once all of
 * it is reaped), so the tree holds still: one descriptor at a time, the
 * walk goes up by "..", which stays on the mount as no other is entered. */
static int hand_tree(const char *path, uid_t uid, gid_t gid) {
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	uint64_t mnt;
	mode_t mode;
	if (entry_of(fd, "", &mnt, &mode) < 0 || fchown(fd, uid, gid) < 0)
		goto fail;
	size_t depth = 0;
	hand_off[0] = 0;
	for (;;) {
		if (lseek(fd, hand_off[depth], SEEK_SET) < 0)
			goto fail;
		long n = syscall(SYS_getdents64, fd, hand_buf, sizeof hand_buf);
		if (n < 0)
			goto fail;
		if (n == 0) {
			if (depth == 0)
				break;
			int up = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (up < 0)
				goto fail;
			close(fd);
			fd = up, depth--;
			continue;
		}
		int child = -1;
		for (long pos = 0; pos < n && child < 0;) {
			struct hand_dirent *d = (struct hand_dirent *)(hand_buf + pos);
			pos += d->reclen;
			hand_off[depth] = d->off;
			if (strcmp(d->name, ".") == 0 || strcmp(d->name, "..") == 0)
				continue;
			uint64_t m;
			if (entry_of(fd, d->name, &m, &mode) < 0)
				goto fail;
			if (m != mnt)
				continue; /* a mount point: a bind's, not this tree's */
			if (fchownat(fd, d->name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
				goto fail;
			if (!S_ISDIR(mode))
				continue;
			if (depth + 1 >= HAND_MAX_DEPTH) {
				hand_too_deep = 1;
				errno = ELOOP;
				goto fail;
			}
			if ((child = openat(fd, d->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
				goto fail;
		}
		if (child >= 0) {
			close(fd);
			fd = child;
			hand_off[++depth] = 0;
		}
	}
	close(fd);
	return 0;
fail:;
	int err = errno;
	close(fd);
	errno = err;
	return -1;
}

void init_hand_trees(char **dirs, uid_t uid, gid_t gid) {
	for (; dirs && *dirs; dirs++) {
		if (hand_tree(*dirs, uid, gid) == 0)
			continue;
		char step[256];
		snprintf(step, sizeof step, "hand %s to uid %u inside the box%s", *dirs, (unsigned)uid,
		         hand_too_deep ? ": more than " ISOLATE_STR(HAND_MAX_DEPTH) " directories deep" : "");
		init_fail(step, errno);
	}
}

/*
 * The protocol between the supervisor (Go) and the box's init (C),
 * described once: C includes this file, Go reads the same constants
 * through cgo (protocol.go). doc.go tells the conversation in prose.
 */
#ifndef ISOLATE_PROTOCOL_H
#define ISOLATE_PROTOCOL_H

/* argv[1] of a process that is a box's init (see init_main.c). */
#define ISOLATE_INIT_ARG "__isolate_init__"

/* init's fixed descriptors; 0-2 are the program's standard streams. */
enum {
	/* supervisor <-> init, a stream socket: the plan (the cgroup files
	 * attached as SCM_RIGHTS), then control bytes. */
	ISOLATE_FD_CONTROL = 3,
	/* init -> supervisor, a pipe: status messages, one JSON line each. */
	ISOLATE_FD_STATUS = 4,
	/* From here on, in order: the seccomp listener socket, then the
	 * image's mount, when the run has them. */
	ISOLATE_FD_EXTRA = 5,
	/* PID 1's listener on the box's loopback for a network allowlist
	 * (LISTEN): the supervisor takes a copy (pidfd_getfd) and serves it.
	 * High enough that no descriptor sent with the plan takes it. */
	ISOLATE_FD_PROXY = 1000,
};

/* Control bytes the supervisor sends once the plan is complete. */
enum {
	ISOLATE_CTL_KILL = 'k', /* a limit was hit: kill every process of the program */
};

/* Status message types ("type" of each JSON line init sends). */
#define ISOLATE_MSG_READY "ready"     /* the box is built; waiting for the command part */
#define ISOLATE_MSG_STARTED "started" /* the program runs */
#define ISOLATE_MSG_EXITED "exited"   /* the program and everything it left are gone */
#define ISOLATE_MSG_ERROR "error"     /* a step failed: step, op, path, err, errno */

/*
 * The plan is a sequence of records, integers little-endian:
 *
 *	u32 op, u32 nints, u32 nstrs,
 *	string step (what the record does, for error messages),
 *	nints x u64, nstrs x string
 *
 * where a string is a u32 length and that many bytes (which may hold NUL
 * bytes: file contents, BPF). It comes in two parts: the box (BOX_END
 * closes it) and the command (END closes it); see doc.go.
 *
 * Every operation, with the integers and strings it takes (ANY: any
 * number of strings). Adding one is a line here, a case in init's switch
 * (init_fs.c or init_proc.c) and an encoder in protocol.go.
 */
#define ISOLATE_ANY (-1)
#define ISOLATE_OPS(X)                                                                                               \
	/* --- the box part --- */                                                                                   \
	X(PLACE_FD, "place-fd", 1, 0)    /* the first received descriptor not yet placed takes this number (early init) */ \
	X(HOSTNAME, "hostname", 0, 1)     /* name */                                                                 \
	X(LOOPBACK, "loopback", 0, 0)     /* bring up lo */                                                          \
	X(LISTEN, "listen", 1, 0)         /* port: listen on 127.0.0.1:port at ISOLATE_FD_PROXY (close-on-exec) */   \
	X(SYSCTL, "sysctl", 0, 2)         /* path, value */                                                          \
	X(PRIVATE, "private", 0, 0)       /* make every mount private */                                             \
	X(MOUNT, "mount", 1, 4)           /* flags; source, target, fstype, data ("": none) */                       \
	X(MOVE_MOUNT, "move-mount", 1, 1) /* inherited descriptor of a detached mount; target (closed once moved) */ \
	X(SETATTR, "setattr", 2, 1)       /* attributes to set, 1 for the whole subtree; path */                    \
	X(MKDIR, "mkdir", 1, 1)           /* mode; path (and missing parents) */                                     \
	X(TOUCH, "touch", 1, 1)           /* mode; path of an empty file (and missing parents) */                    \
	X(SYMLINK, "symlink", 0, 2)       /* target, path */                                                         \
	X(WRITE, "write", 1, 2)           /* mode; path, content */                                                  \
	X(REMOUNT_RO, "remount-ro", 0, 1) /* path */                                                                 \
	X(PIVOT, "pivot", 0, 1)           /* new root */                                                             \
	X(PREPARE, "prepare", 1, 1)       /* listener wanted (1/0); the BPF program its commands normally load */    \
	X(SESSION, "session", 0, 0)       /* serve many commands until fd 3 closes (init_session.c) */              \
	X(BOX_END, "box-end", 1, 0)       /* 1: say "ready" and wait; the box part ends */                           \
	/* --- the command part --- */                                                                               \
	X(ARGV, "argv", 0, ISOLATE_ANY)   /* the program's arguments */                                              \
	X(ENV, "env", 0, ISOLATE_ANY)     /* its environment */                                                      \
	X(DIR, "dir", 0, 1)               /* its working directory */                                                \
	X(CRED, "cred", 2, 0)             /* uid, gid */                                                             \
	X(RLIMIT, "rlimit", 2, 0)         /* resource, limit (soft and hard) */                                      \
	X(CGROUP_TASKS, "cgroup", 1, 0)   /* received descriptor: a tasks file the program writes itself into (v1) */ \
	X(CGROUP_FORK, "cgroup-fork", 1, 0) /* received descriptor: the cgroup the program is born in (v2) */       \
	X(SECCOMP, "seccomp", 1, 1)       /* listener socket's descriptor or -1; the BPF program */                  \
	X(STDERR_TO_STDOUT, "stderr-to-stdout", 0, 0)                                                                \
	X(STDIO, "stdio", 3, 0)           /* received descriptors for the program's fd 0, 1, 2 (-1: keep init's) */ \
	X(HOLD, "hold", 0, 0)             /* keep the box after the program until the supervisor closes fd 3 */     \
	X(TELL_START, "tell-start", 0, 0) /* tell the program's start at once, not up to 10 ms late */              \
	X(COMMAND_ID, "command-id", 1, 0) /* a session's command: its number, in its messages */                    \
	X(HAND_OVER, "hand-over", 1, ISOLATE_ANY) /* 1: back to uid 0 once the box is reaped; directories (below) */ \
	X(END, "end", 0, 0)               /* the command part ends: start the program */                             \
	/* --- a session's control records, between its commands --- */                                          \
	X(SIGNAL, "signal", 2, 0)         /* command number (0: every process of the box), signal */

/*
 * HAND_OVER: the directories the supervisor filled as the box's uid 0 (a
 * caller without root whose box user is a subordinate id, which the
 * supervisor cannot act as). PID 1 gives each tree, on its own mount, to
 * the program's uid and gid (CRED) before the program starts, and with 1
 * gives it back to uid 0 once every process of the box is reaped, before
 * it reports the end: no link is followed, no other mount entered.
 */
#define ISOLATE_OP_ENUM(name, text, ints, strs) ISOLATE_OP_##name,
enum isolate_op { ISOLATE_OP_NONE, ISOLATE_OPS(ISOLATE_OP_ENUM) ISOLATE_OP_COUNT };
#undef ISOLATE_OP_ENUM

/* Bounds the reader enforces: a plan beyond them is refused, not cut. */
enum {
	ISOLATE_MAX_FIELDS = 1 << 20,     /* integers or strings of one record */
	ISOLATE_MAX_STRING = 64 << 20,    /* bytes of one string */
};

#endif

package seccomp

import "golang.org/x/sys/unix"

// horizon is the newest x86_64 syscall the default policy was written
// against (futex_requeue, Linux 6.7). Every syscall number above it fails
// with ENOSYS, without a notification: such a syscall is newer than the
// policy, and runtimes probe new syscalls and fall back on ENOSYS.
const horizon = 456

// allowed are the syscalls the default policy lets through unconditionally.
// Sized from what C/C++ (glibc), Go, CPython, Node.js (libuv), Rust and the
// JVM call in ordinary programs, and from Go's own fork/exec child code,
// which runs under the filter (it is loaded before init forks the program).
// Everything known to the kernel that is neither here nor in conditional
// is refused with EPERM and recorded.
var allowed = []string{
	// files and descriptors
	"read", "write", "open", "openat", "openat2", "close", "close_range",
	"creat", "lseek", "pread64", "pwrite64", "readv", "writev", "preadv",
	"pwritev", "preadv2", "pwritev2", "sendfile", "splice", "tee", "vmsplice",
	"copy_file_range", "dup", "dup2", "dup3", "fcntl", "flock", "fsync",
	"fdatasync", "sync_file_range", "fallocate", "fadvise64", "readahead",
	"truncate", "ftruncate", "pipe", "pipe2", "ioctl",
	"stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
	"access", "faccessat", "faccessat2", "getdents", "getdents64", "getcwd",
	"chdir", "fchdir", "rename", "renameat", "renameat2", "mkdir", "mkdirat",
	"rmdir", "link", "linkat", "unlink", "unlinkat", "symlink", "symlinkat",
	"readlink", "readlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2",
	"chown", "fchown", "lchown", "fchownat", "umask", "mknod", "mknodat",
	"utime", "utimes", "futimesat", "utimensat",
	"getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr",
	"flistxattr", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
	"lremovexattr", "fremovexattr",
	"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
	"memfd_create", "cachestat",
	// polling and event descriptors
	"poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1",
	"epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd",
	"eventfd2", "signalfd", "signalfd4", "timerfd_create", "timerfd_settime",
	"timerfd_gettime",
	// memory
	"brk", "mmap", "munmap", "mremap", "mprotect", "msync", "mincore",
	"madvise", "mlock", "mlock2", "munlock", "mlockall", "munlockall",
	"pkey_alloc", "pkey_free", "pkey_mprotect", "membarrier", "mbind",
	"get_mempolicy", "set_mempolicy", "set_mempolicy_home_node",
	"map_shadow_stack",
	// processes and threads
	"clone3", "fork", "vfork", "execve", "execveat", "exit", "exit_group",
	"wait4", "waitid", "getpid", "getppid", "gettid", "getpgid", "setpgid",
	"getpgrp", "getsid", "setsid", "set_tid_address", "set_robust_list",
	"get_robust_list", "rseq", "arch_prctl", "prctl", "set_thread_area",
	"get_thread_area", "futex", "futex_waitv", "futex_wake", "futex_wait",
	"futex_requeue", "sched_yield", "sched_getaffinity", "sched_setaffinity",
	"sched_getparam", "sched_setparam", "sched_getscheduler",
	"sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min",
	"sched_rr_get_interval", "sched_getattr", "sched_setattr", "getpriority",
	"setpriority", "ioprio_get", "ioprio_set", "getcpu",
	"pidfd_open", "pidfd_send_signal",
	// credentials (without capabilities they can only drop or keep ids)
	"getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
	"getgroups", "setuid", "setgid", "setreuid", "setregid", "setresuid",
	"setresgid", "setgroups", "setfsuid", "setfsgid", "capget", "capset",
	// signals and timers
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
	"rt_sigtimedwait", "rt_sigsuspend", "rt_sigqueueinfo",
	"rt_tgsigqueueinfo", "sigaltstack", "kill", "tkill", "tgkill", "pause",
	"alarm", "getitimer", "setitimer", "timer_create", "timer_settime",
	"timer_gettime", "timer_getoverrun", "timer_delete", "nanosleep",
	"clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday",
	"time", "restart_syscall",
	// resources and system information
	"getrlimit", "setrlimit", "prlimit64", "getrusage", "times", "sysinfo",
	"uname", "getrandom",
	// sockets (socket and socketpair are conditional: address families)
	"connect", "accept", "accept4", "bind", "listen", "shutdown",
	"getsockname", "getpeername", "setsockopt", "getsockopt", "sendto",
	"recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
	// System V and POSIX IPC (private to the box's IPC namespace)
	"shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop",
	"semctl", "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink",
	"mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
	// a program may restrict itself further
	"seccomp", "landlock_create_ruleset", "landlock_add_rule",
	"landlock_restrict_self",
}

// cond is one argument test: (arg & Mask) == Value on the low 32 bits
// of the argument, which is all the kernel reads of an int argument.
type cond struct {
	Arg   uint
	Mask  uint32
	Value uint32
}

// condRule allows a syscall when all its conditions hold.
type condRule struct {
	Name  string
	Conds []cond
}

// namespaceFlags are the clone flags that create namespaces. The runtime
// stops them anyway (no capabilities, max_user_namespaces=0 in the box's
// user namespace); refusing them here names the attempt in the report.
// CLONE_NEWTIME (0x80) overlaps clone's exit-signal byte, where it can only
// mean an invalid signal: refusing it costs nothing.
const namespaceFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
	unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS |
	unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// conditional are the syscalls allowed only for some argument values; any
// other value is refused (EPERM, recorded). clone3's flags are behind a
// pointer the filter cannot read: it is allowed, and namespace creation
// through it is stopped by the missing capabilities (see SECURITY.md).
var conditional = []condRule{
	{"clone", []cond{{0, namespaceFlags, 0}}},
	// The standard personalities (what Docker allows): PER_LINUX,
	// PER_LINUX32, UNAME26 variants, and the 0xffffffff query.
	{"personality", []cond{{0, 0xffffffff, 0x0}}},
	{"personality", []cond{{0, 0xffffffff, 0x8}}},
	{"personality", []cond{{0, 0xffffffff, 0x20000}}},
	{"personality", []cond{{0, 0xffffffff, 0x20008}}},
	{"personality", []cond{{0, 0xffffffff, 0xffffffff}}},
	{"socket", []cond{{0, 0xffffffff, unix.AF_UNIX}}},
	{"socket", []cond{{0, 0xffffffff, unix.AF_INET}}},
	{"socket", []cond{{0, 0xffffffff, unix.AF_INET6}}},
	{"socketpair", []cond{{0, 0xffffffff, unix.AF_UNIX}}},
}

// refusedIoctls are the ioctl requests refused although ioctl is allowed:
// TIOCSTI pushes input into a terminal, TIOCLINUX reaches the console.
// libseccomp cannot express "any value but these" on the low 32 bits (the
// kernel ignores the high ones), so a small hand-written BPF prologue
// checks them before libseccomp's program (see bpf.go).
var refusedIoctls = []uint32{unix.TIOCSTI, unix.TIOCLINUX}

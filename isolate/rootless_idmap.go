package isolate

// The user namespace of a caller's idmapped binds. A bind a caller who
// is not root hands over is mounted idmapped (MOUNT_ATTR_IDMAP): the
// caller's uid and gid on disk are the box user's in the box, every other
// owner is nobody's. So the program reads and writes there with the
// caller's owner rights, or with others' rights, never more: not a file of
// another box uid (a box id's uid serves every caller in turn), not one of
// the caller's that the caller's own mode bits deny it. What the program
// creates there is the caller's on disk.

// #define _GNU_SOURCE
// #include <sched.h>
// #include <signal.h>
// #include <sys/prctl.h>
// #include <sys/syscall.h>
// #include <unistd.h>
//
// // A child in a user namespace of its own, without maps, waiting for
// // the write end of hold to close (every signal blocked: the Go
// // runtime's handlers must never run in it): the parent writes its maps
// // and opens the namespace meanwhile. Only system calls run in the child.
// static int isolate_hold_userns(int hold) {
// 	long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
// 	if (pid == 0) {
// 		char c;
// 		unsigned long all = ~0UL;
// 		syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, 0, sizeof(all));
// 		syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
// 		while (syscall(SYS_read, hold, &c, 1) < 0)
// 			;
// 		syscall(SYS_exit_group, 0);
// 	}
// 	return (int)pid;
// }
import "C"

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// idmapUserns is a user namespace (its descriptor) mapping host uid
// from.UID to to.UID and gid from.GID to to.GID, and nothing else: the
// mapping of an idmapped mount.
func idmapUserns(from, to Cred) (*os.File, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	pid, err := C.isolate_hold_userns(C.int(p[0]))
	unix.Close(p[0])
	if pid <= 0 {
		unix.Close(p[1])
		return nil, fmt.Errorf("create a user namespace for an idmapped bind: %v", err)
	}
	defer func() {
		unix.Close(p[1]) // the child ends
		unix.Kill(int(pid), unix.SIGKILL)
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(int(pid), &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
	}()
	proc := "/proc/" + strconv.Itoa(int(pid)) + "/"
	for _, m := range []struct{ file, line string }{
		{"uid_map", fmt.Sprintf("%d %d 1\n", from.UID, to.UID)},
		{"gid_map", fmt.Sprintf("%d %d 1\n", from.GID, to.GID)},
	} {
		if err := os.WriteFile(proc+m.file, []byte(m.line), 0); err != nil {
			return nil, fmt.Errorf("map an idmapped bind's user namespace: %w", err)
		}
	}
	return os.Open(proc + "ns/user")
}

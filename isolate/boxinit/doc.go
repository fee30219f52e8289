// Package boxinit is the box's init and the protocol the supervisor
// speaks to it: the C that runs in a box as its PID 1 (init_*.c), the C
// every isolate binary runs before the Go runtime starts (procs.c: one
// CPU while the runtime boots; init_main.c's constructor, which becomes
// init when started with InitArg, or forks the one-shot run's init ahead,
// early.h), the plan's records (Plan, protocol.go, from protocol.h) and
// init's messages (Message), and the handle of an init process (Proc).
// initbin is the same C built alone, the small init long-running
// processes start.
//
// It knows no supervisor, run or session: package isolate's initlink.go
// is the supervisor's end of the conversation, earlyinit.go and
// initexe.go how it starts an init.
//
// # The protocol
//
// protocol.h defines the protocol once (op codes, descriptors, control
// bytes, message types); protocol.go reads it through cgo and encodes the
// plan, package isolate's initlink.go is the supervisor's end, init_*.c is
// init's.
//
// init's descriptors: 0-2 the program's standard streams; 3 (FDControl) a
// stream socket, both ways; 4 (fdStatus) a pipe, init to supervisor; from 5
// the seccomp listener socket and the image's mount, when the run has
// them.
//
// Supervisor to init, on fd 3, in order:
//
//	box part      records: hostname, loopback, sysctl, then rootfs.Plan's
//	              file system (private, mount, setattr, mkdir, touch,
//	              symlink, write, remount-ro, pivot); for a box built
//	              ahead, PREPARE{listener wanted, BPF}: once the box is
//	              built, the program's process starts with that filter
//	              loaded and waits for a command that has it (others get
//	              a process of their own); BOX_END{announce}. PID 1
//	              carries each out as it arrives.
//	command part  records: argv, env, dir, cred, rlimit..., seccomp{listener
//	              fd, BPF}, stderr-to-stdout, hold, hand-over{back, dirs}
//	              (a box user that is a subordinate id: PID 1 gives dirs
//	              to it before the program, and with back to uid 0 once
//	              the box is reaped, before exited), cgroup /
//	              cgroup-fork{index of a descriptor sent with this part};
//	              END. PID 1 then starts the program.
//	ctlKill       byte 'k', any time after: kill every process of the box.
//	close         the supervisor is done (or dead): init takes the box
//	              down, or, with hold, stops waiting and exits.
//
// A session's box (package isolate's session.go) has SESSION in its box part: PID 1 then
// takes command parts (each with COMMAND_ID{n}) and SIGNAL{n, sig}
// records (n 0: every process of the box) one after another until fd 3
// closes, starting each command as it ends, and says started {id} and
// exited {id, ...} for each; what a command leaves running stays.
//
// A record is u32 op, u32 number of integers, u32 number of strings, the
// step (a string naming the record for error messages), the integers (u64)
// and the strings (u32 length, bytes), little-endian. init refuses a
// record whose counts do not match protocol.h.
//
// Init to supervisor, on fd 4, one JSON line each (Message):
//
//	ready    {pid}: the box is built (only when BOX_END asked): the
//	         supervisor may fill it through /proc/pid/root, then sends
//	         the command part.
//	started  {pid, stages, exec_ns}: the program runs since exec_ns
//	         (CLOCK_MONOTONIC). Init tells it up to 10 ms late, in one
//	         write with exited if the program ends sooner, so that the
//	         supervisor is not woken while a short program runs; the
//	         limits and setup_time count from exec_ns. With a seccomp
//	         recorder, at once.
//	exited   {pid, ws, wall_ns, utime_ns, stime_ns, maxrss_kb, nvcsw,
//	         nivcsw}: the program and everything it left are gone; with
//	         {exec_err, step, errno} if it could not be started (ws is
//	         then exit status 127).
//	error    {step, op, path, err, errno}: a step failed; init exits.
//	         The supervisor returns it as a *StepError.
//
// The one-shot run sends the two parts back to back (the cgroup files
// are made meanwhile); with --copy-in it announces the box part and fills
// the box before sending the command part. A pool of boxes built ahead
// keeps each as a pendingBox (isolate's startBox) and starts it with
// its command (pendingBox.start) when one comes.
package boxinit

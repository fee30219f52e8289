// Package hostfs is what the root supervisor does with files on the host
// on someone else's behalf: the caller's files (standard streams, report
// and meta files, copy-in sources, copy-out destinations, bind sources)
// and the box's files seen from the host (copy-in destinations, copy-out
// sources). It holds the rules, so that they are kept in one place.
//
// What it guarantees:
//
//   - Rights. Every open runs with the file-system credentials (fsuid,
//     fsgid, supplementary groups) of whoever the path belongs to: the
//     caller's (a Cred; nil is this process's own, OwnCred) for the
//     caller's paths, the box user's for paths inside the box. They are
//     switched on one locked OS thread (FSThread, WithFSThread,
//     GoFSThread, AsCaller) and restored before the thread goes back to
//     the Go scheduler, so no other goroutine ever runs with them. What
//     runs with the thread's own credentials: the detached copy of a bind
//     source (OpenBindSource) and the consumer of a copy-out taken as
//     data (SinkOut), on what was opened with the caller's or the box
//     user's; reading this process's mount table; and CheckOutput, which
//     a front end acting for another caller runs inside AsCaller.
//   - Descriptors only. A path is looked up once; what follows works on
//     the descriptor it gave (fstat, openat, mkdirat, linkat, open_tree),
//     never on the name again, so a program that swaps a directory for a
//     symlink meanwhile redirects nothing. A copy-out destination's
//     directory is opened before the program starts (OpenHostPath), a
//     report file is created before it starts and written after through
//     its descriptor (CreateReportFile).
//   - No symlink followed out. A caller's path is resolved with no
//     symlink and no /proc magic link anywhere in it (openat2
//     RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS); the refusal names the
//     symlink met. A name of a descriptor (/dev/stdout, /proc/self/fd/N)
//     means the caller's own (Cred.Std for another process's). A box path
//     is resolved inside the box's root (RESOLVE_IN_ROOT), so nothing
//     leads out of it. Inside a copied tree, symlinks (and, from the box,
//     mounts) are skipped, never followed; nothing is written through a
//     symlink, onto a device or onto a file bound into the box.
//   - Only data. What is read or written must be a regular file or a
//     directory on a file system that holds data: a FIFO, socket or
//     device is refused (except where a standard stream may be one, and
//     then opened without blocking: a FIFO with no peer is an error or,
//     for standard input, a wait that ends with a context or a wall
//     time, OpenFIFO), and so
//     is anything on procfs, sysfs or another kernel interface, whatever
//     its mode says; a bind source below which such a file system is
//     mounted is refused too.
//   - Bounds. A copy-out is bounded in data bytes (holes cost nothing),
//     files, depth and time (Budget, CopyOutBudget, CopyMaxDepth,
//     CopyTimeout); a copy-in is bounded by the box's file system. Trees
//     are walked iteratively, two descriptors per level.
//
// Bad names the caller gave come back as *api.UsageError.
package hostfs

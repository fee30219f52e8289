package ioi

// The program's standard streams in the ioi form. -i, -o and -r name files
// inside the box, relative to /box. ioi/isolate opens them inside the box
// as the box user; here the supervisor (root) opens them, so we first open
// each one on the host as the box user would see it: resolved inside the
// host directory that holds it with RESOLVE_IN_ROOT (a symlink the program
// planted cannot lead out of that directory) and with the box user's
// file-system credentials (only what the box user may open opens). The
// supervisor then reopens that very file through /proc/self/fd.
//
// Without -i, -o or -r, the program inherits isolate's own streams, as
// with ioi/isolate (Judge0 redirects them with the shell around isolate).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/isolate/hostfs"
)

// ioiStdio holds what the program's streams need during and after a run.
type ioiStdio struct {
	caller *Caller    // whose streams the program inherits
	open   []*os.File // files opened for the run, closed after it
	// errOut is where the program's standard error went, for the line
	// ioi/isolate writes there when the program cannot be executed.
	errOut *os.File
	// reopened are isolate's own stdout/stderr when the program got a
	// second open file description of them: before isolate writes to
	// them again, it moves to their end, past what the program wrote.
	reopened []int
}

func (s *ioiStdio) close() {
	for _, f := range s.open {
		f.Close()
	}
}

// setup gives the program its streams from the options: files opened
// in the box, or isolate's own, passed on, reopened or relayed. Files are
// opened in ioi/isolate's order, stdin, stdout, stderr: a FIFO blocks
// until its other end is opened, and two programs that meet through
// FIFOs depend on that order. ctx ends the wait.
func (s *ioiStdio) setup(ctx context.Context, o *Options, spec *isolate.Spec, mounts []mountPoint, boxUID int) (isolate.IO, error) {
	var stdio isolate.IO
	spec.StderrToStdout = o.stderrToStdout
	// Each file is given to the program as a new open of what it names
	// (not the descriptor opened here, which is non-blocking, nor
	// isolate's own, whose offset the program must not move).
	reopen := func(p string, write bool) (*os.File, error) {
		var f *os.File
		var err error
		if write {
			f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		} else {
			f, err = os.Open(p)
		}
		if err != nil {
			return nil, err
		}
		s.open = append(s.open, f)
		return f, nil
	}
	var files [3]*os.File
	var inherited [3]bool
	own := [3]*os.File{s.caller.Stdin, s.caller.Stdout, s.caller.Stderr}
	names := [3]string{o.stdin, o.stdout, o.stderr}
	for fd, name := range names {
		if name == "" {
			inherited[fd] = true
			continue
		}
		file, err := openInBox(ctx, mounts, name, fd > 0, boxUID)
		if err != nil {
			return stdio, err
		}
		// The program gets this very open file, as ioi/isolate's would:
		// a reopen of a FIFO would wait for its other end once more.
		s.open = append(s.open, file)
		files[fd] = file
		if fd == 2 || (fd == 1 && o.stderrToStdout) {
			s.errOut = file
		}
	}
	if inherited[0] {
		f, err := inheritedInput(own[0], reopen)
		if err != nil {
			return stdio, fmt.Errorf("open stdin: %w", err)
		}
		files[0] = f
	}
	if inherited[1] && inherited[2] && !o.stderrToStdout && sameFile(fdOf(own[1]), fdOf(own[2])) {
		// One file opened once (2>&1): the program must share a single
		// offset for both, as it would with ioi/isolate.
		spec.StderrToStdout = true
	}
	if files[0] != nil {
		stdio.Stdin = files[0]
	}
	outs := []*interface{ Write([]byte) (int, error) }{nil, &stdio.Stdout, &stdio.Stderr}
	for fd := 1; fd <= 2; fd++ {
		if files[fd] != nil {
			*outs[fd] = files[fd]
			continue
		}
		if !inherited[fd] || (fd == 2 && spec.StderrToStdout) {
			continue
		}
		w, err := s.inheritOutput(fdOf(own[fd]), spec, reopen)
		if err != nil {
			return stdio, err
		}
		*outs[fd] = w
	}
	if inherited[1] && spec.StderrToStdout && s.errOut == nil {
		s.errOut = own[1]
	}
	if inherited[2] && !spec.StderrToStdout {
		s.errOut = own[2]
	}
	return stdio, nil
}

// openInBox opens the file the box path name (relative to /box) refers
// to, as the box user would: a regular file, a device the box may use, or
// a FIFO, whose open waits for its other end (another program, as CMS's
// Communication task type has it) until ctx is done.
func openInBox(ctx context.Context, mounts []mountPoint, name string, write bool, uid int) (*os.File, error) {
	fail := func(err error) error { return fmt.Errorf("open(%q): %s", name, strerror(err)) }
	p := name
	if !path.IsAbs(p) {
		p = path.Join("/box", p)
	}
	p = path.Clean(p)
	var mp *mountPoint
	for i := range mounts {
		m := &mounts[i]
		if (p == m.box || strings.HasPrefix(p, m.box+"/")) && (mp == nil || len(m.box) > len(mp.box)) {
			mp = m
		}
	}
	if mp == nil {
		return nil, fmt.Errorf("open(%q): only files under /box, a directory rule or /dev/null can be redirected here", name)
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p, mp.box), "/")
	dir, base := mp.host, rel
	if rel == "" {
		// A device (or file) that is itself the mount point: resolve its
		// name in its directory.
		dir, base = path.Dir(mp.host), path.Base(mp.host)
	}
	// The directory itself is the caller's (root's) to open; what lies
	// below it is the box user's.
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fail(err)
	}
	defer unix.Close(dirfd)
	flags := unix.O_RDONLY
	if write {
		flags = unix.O_WRONLY | unix.O_CREAT | unix.O_TRUNC
	}
	// First the name alone, to learn what it is before opening it (which
	// may block, truncate or create).
	pathFD, err := openAs(uid, func() (int, error) {
		return unix.Openat2(dirfd, base, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: inBox})
	})
	if err == unix.ENOENT && write && !mp.writable {
		return nil, fail(unix.EROFS)
	}
	if err == unix.ENOENT && write {
		// A new file: O_EXCL, so that nothing put there meanwhile is
		// opened without the checks below.
		fd, err := openAs(uid, func() (int, error) {
			how := &unix.OpenHow{Flags: uint64(flags | unix.O_EXCL | unix.O_NOCTTY | unix.O_CLOEXEC), Mode: 0o666, Resolve: inBox}
			return unix.Openat2(dirfd, base, how)
		})
		if err != nil {
			return nil, fail(err)
		}
		// ioi/isolate's mode (0666 under its umask 022) whatever this
		// process's umask, which is never changed here.
		if err := unix.Fchmod(fd, 0o644); err != nil {
			unix.Close(fd)
			return nil, fail(err)
		}
		return os.NewFile(uintptr(fd), p), nil
	}
	if err != nil {
		return nil, fail(err)
	}
	defer unix.Close(pathFD)
	var st unix.Stat_t
	if err := unix.Fstat(pathFD, &st); err != nil {
		return nil, fail(err)
	}
	reopen := func(path string, flags int) (int, error) {
		return openAs(uid, func() (int, error) { return unix.Open(path, flags, 0) })
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		f, err := hostfs.OpenFIFO(ctx, pathFD, flags&unix.O_ACCMODE, reopen)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		} else if err != nil {
			return nil, fail(err)
		}
		return f, nil
	case unix.S_IFCHR, unix.S_IFBLK:
		// The box mounts a directory rule nodev unless it says dev.
		if !mp.dev {
			return nil, fail(unix.EACCES)
		}
	case unix.S_IFSOCK:
		return nil, fail(unix.ENXIO) // what open(2) of a socket says
	case unix.S_IFDIR:
		return nil, fail(unix.EISDIR)
	default:
		// A read-only mount refuses writing files, not FIFOs or
		// devices, which write nothing to it.
		if write && !mp.writable {
			return nil, fail(unix.EROFS)
		}
	}
	// Non-blocking so that a device cannot hold the open; the program
	// gets the file blocking, as files are.
	fd, err := reopen("/proc/self/fd/"+strconv.Itoa(pathFD), flags&^unix.O_CREAT|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, fail(err)
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
		unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// inBox resolves a name as the box sees it: symlinks stay inside the
// directory that holds it, and /proc's magic links lead nowhere.
const inBox = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// openAs runs open with the file-system credentials of host uid (and gid)
// uid and no supplementary groups (hostfs.AsCaller: on one locked thread
// only, so no other goroutine ever runs with them).
func openAs(uid int, open func() (int, error)) (fd int, err error) {
	err = hostfs.AsCaller(&hostfs.Cred{UID: uid, GID: uid}, func() (err error) {
		fd, err = open()
		return err
	})
	return fd, err
}

// inheritedInput is the program's standard input when -i is not given:
// isolate's own, passed on as ioi/isolate passes it (a pipe, a file, a
// terminal, or a socket, which Node's child_process gives its children),
// or /dev/null when there is none. What may never be a program's stream
// (a directory, a file of a kernel interface, a device other than a
// terminal or the box's own: hostfs.CheckStreamFD) is refused.
func inheritedInput(stdin *os.File, reopen func(string, bool) (*os.File, error)) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fdOf(stdin), &st); err != nil {
		return reopen(os.DevNull, false)
	}
	if err := hostfs.CheckStreamFD(fdOf(stdin)); err != nil {
		return nil, fmt.Errorf("isolate's standard input %w", err)
	}
	return stdin, nil
}

// fdOf is f's descriptor, -1 for none.
func fdOf(f *os.File) int {
	if f == nil {
		return -1
	}
	return int(f.Fd())
}

// inheritOutput is the program's stream fd when -o or -r does not name a
// file: a second open of isolate's own when that is the same thing (a
// pipe, a terminal, a device, an empty file written from its start), else
// a relay of the captured stream to isolate's own descriptor (always, for
// what may not be a program's stream: hostfs.CheckStreamFD), which keeps
// its offset and append mode (and stops at the -f limit, which a program
// writing through the relay does not hit itself).
func (s *ioiStdio) inheritOutput(fd int, spec *isolate.Spec, reopen func(string, bool) (*os.File, error)) (interface{ Write([]byte) (int, error) }, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return reopen(os.DevNull, true)
	}
	self := "/proc/self/fd/" + strconv.Itoa(fd)
	// Only what may be a program's stream is reopened for it; anything
	// else (a directory, a file of a kernel interface, another device)
	// is written through the relay below, never given to the program.
	ok := hostfs.CheckStreamFD(fd) == nil
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFCHR:
		if ok {
			return reopen(self, true)
		}
	case unix.S_IFREG:
		if !ok {
			break
		}
		off, _ := unix.Seek(fd, 0, io.SeekCurrent)
		fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if st.Size == 0 && off == 0 && fl&unix.O_APPEND == 0 {
			s.reopened = append(s.reopened, fd)
			return reopen(self, true)
		}
	}
	// A duplicate, so that a closed reader makes writes fail with EPIPE
	// instead of killing isolate (Go raises SIGPIPE only for fds 1 and 2).
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return reopen(os.DevNull, true)
	}
	f := os.NewFile(uintptr(dup), "relay")
	s.open = append(s.open, f)
	limit := int64(-1)
	if st.Mode&unix.S_IFMT == unix.S_IFREG && spec.FileSize > 0 {
		limit = spec.FileSize
	}
	spec.OutputLimit = 1 // the report keeps nothing worth keeping
	return &relay{w: f, left: limit}, nil
}

// relay copies a captured stream to a descriptor, up to left bytes (-1:
// no limit); errors only stop the copy.
type relay struct {
	w    io.Writer
	left int64
	dead bool
}

func (r *relay) Write(p []byte) (int, error) {
	n := len(p)
	if r.dead {
		return n, nil
	}
	if r.left >= 0 {
		if int64(len(p)) > r.left {
			p = p[:r.left]
		}
		r.left -= int64(len(p))
	}
	if _, err := r.w.Write(p); err != nil {
		r.dead = true
	}
	return n, nil
}

// sameFile tells whether descriptors a and b are the same regular file.
func sameFile(a, b int) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(a, &sa) != nil || unix.Fstat(b, &sb) != nil {
		return false
	}
	return sa.Mode&unix.S_IFMT == unix.S_IFREG && sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// afterRun moves isolate's own reopened streams past what the program
// wrote, so that isolate's messages follow the program's output.
func (s *ioiStdio) afterRun() {
	for _, fd := range s.reopened {
		unix.Seek(fd, 0, io.SeekEnd)
	}
}

// strerror is the C library's text for an error: "No such file or
// directory", as ioi/isolate prints it.
func strerror(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		msg := errno.Error()
		return strings.ToUpper(msg[:1]) + msg[1:]
	}
	return err.Error()
}

package hostfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
)

// The host files a caller names for a run's standard streams (the CLI's
// --stdin, --stdout, --stderr). A front end opens them with these and
// hands them to the runtime (isolate.IO) as *os.File; every such open is here, so that
// it is made safe in one place.

// usagef is a *api.UsageError: the caller named a file that cannot be
// used.
func usagef(format string, a ...any) error { return &api.UsageError{Msg: fmt.Sprintf(format, a...)} }

// OpenStdin opens the caller's file path as a program's standard input,
// with caller's rights (nil: this process's).
// A missing file or a directory is a *api.UsageError. Isolate's own standard
// input named as a file (/dev/stdin, /proc/self/fd/0), for a nil caller,
// is passed on as it is (a socket, as Node's child_process gives its
// children, cannot be opened again), if it may be a stream at all
// (CheckStreamFD). A FIFO waits for its writer, as open(2) does, but only
// until ctx ends or wall passes (0: no bound).
func OpenStdin(ctx context.Context, caller *Cred, path string, wall time.Duration) (*os.File, error) {
	if n, ok := fdName(path); ok && n == 0 && caller == nil {
		if _, err := os.Stdin.Stat(); err == nil {
			if err := CheckStreamFD(0); err != nil {
				return nil, usagef("--stdin %s: %v", path, err)
			}
			return os.NewFile(0, path), nil
		}
	}
	// Looked at with the caller's rights: whether a path the caller
	// cannot reach exists is none of its business.
	var fi os.FileInfo
	err := AsCaller(caller, func() (err error) {
		fi, err = os.Stat(path)
		return err
	})
	if err != nil {
		return nil, usagef("--stdin %s: %v", path, errors.Unwrap(err))
	} else if fi.IsDir() {
		return nil, usagef("--stdin %s: is a directory", path)
	}
	if fi.Mode()&os.ModeNamedPipe != 0 {
		return openStdinFIFO(ctx, caller, path, wall)
	}
	f, err := openCallerPath(caller, path, openInput)
	if err != nil {
		return nil, usagef("open stdin %v", err)
	}
	return f, nil
}

// openStdinFIFO opens a FIFO for reading without hanging: a writer that
// never comes ends with ctx or the wall-time limit.
func openStdinFIFO(ctx context.Context, caller *Cred, path string, wall time.Duration) (*os.File, error) {
	var pathFD int
	err := WithFSThread(func(t *FSThread) (err error) {
		c := CredOf(caller)
		if err := t.Become(c); err != nil {
			return err
		}
		pathFD, err = openSource(c, path, unix.O_PATH)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("--stdin %s: %v", path, err)
	}
	defer unix.Close(pathFD)
	if wall > 0 && wall < 1e6*time.Second {
		var cancel func()
		ctx, cancel = context.WithTimeout(ctx, wall)
		defer cancel()
	}
	f, err := OpenFIFO(ctx, pathFD, unix.O_RDONLY, func(p string, flags int) (fd int, err error) {
		err = AsCaller(caller, func() (err error) {
			fd, err = unix.Open(p, flags, 0)
			return err
		})
		return fd, err
	})
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("--stdin %s: no writer opened the FIFO within the wall-time limit (%v)", path, wall)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("--stdin %s: interrupted: %v", path, context.Cause(ctx))
	case err != nil:
		return nil, fmt.Errorf("--stdin %s: %v", path, err)
	}
	return f, nil
}

// openCallerPath opens the caller's file path with open, with the
// caller's rights (nil: this process's), never through a symlink: see
// OpenHostPath, openOutput and openInput.
func openCallerPath(who *Cred, path string, open func(*FSThread, Cred, *HostPath) (*os.File, error)) (f *os.File, err error) {
	err = WithFSThread(func(t *FSThread) error {
		caller := CredOf(who)
		h, err := OpenHostPath(t, caller, path)
		if err != nil {
			return err
		}
		defer h.Close()
		f, err = open(t, caller, h)
		return err
	})
	return f, err
}

// CheckOutput tells whether path can be a program's output file, without
// creating it: a directory, or a missing parent directory, is a
// *api.UsageError.
func CheckOutput(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return usagef("output file %s is a directory", path)
	}
	if _, err := os.Stat(DirOf(path)); errors.Is(err, os.ErrNotExist) {
		return usagef("output file %s: directory %s does not exist", path, DirOf(path))
	} else if err != nil {
		return usagef("output file %s: directory %s: %v", path, DirOf(path), errors.Unwrap(err))
	}
	return nil
}

// CreateOutput creates (or truncates) the caller's file path for a
// program's standard output or error, with caller's rights (nil: this
// process's).
func CreateOutput(caller *Cred, path string) (*os.File, error) {
	if err := CheckOutput(path); err != nil {
		return nil, err
	}
	return openCallerPath(caller, path, func(t *FSThread, c Cred, h *HostPath) (*os.File, error) {
		return openOutput(t, c, h, streamsAllow)
	})
}

// CreateReportFile creates (or truncates) the caller's file path
// (or opens the caller's descriptor it names) for what a front end writes
// after the run (a report, a meta file), with
// caller's rights (nil: this process's), before the run: no symlink is
// followed anywhere in path, and the file is written after the run
// through the descriptor returned, never opened again by its name (the
// program may by then have replaced a directory of it, in a read-write
// bind).
func CreateReportFile(caller *Cred, path string) (*os.File, error) {
	return openCallerPath(caller, path, func(t *FSThread, c Cred, h *HostPath) (*os.File, error) {
		// A FIFO or a character device the caller can write (/dev/null,
		// a terminal, a pipe's name) is fine too, as ioi/isolate takes
		// them for -M: only isolate writes it, once the run is over.
		return openOutput(t, c, h, streamsAllow)
	})
}

package server

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/isolate"
)

// workRoot holds each service's own host files for its requests (inline
// copy_in content, copy_out results) while they run: root-only (a
// service without root: its user's alone, SetWorkRoot). Every service
// process has a directory of its own there, locked while it lives, so
// that a service starting beside another one sweeps only what dead
// services left.
var workRoot = "/run/isolate/work"

// SetWorkRoot puts the work directories under dir instead of
// /run/isolate/work, before any request: a service without root keeps
// them in its user's own directory.
func SetWorkRoot(dir string) { workRoot = dir }

// processWork is this process's work directory, made on first use and
// locked (flock on the directory) until the process ends.
var processWork struct {
	once sync.Once
	dir  string
	err  error
}

// workDir is this process's work directory.
func workDir() (string, error) {
	processWork.once.Do(func() {
		if err := os.MkdirAll(workRoot, 0o700); err != nil {
			processWork.err = err
			return
		}
		dir, err := os.MkdirTemp(workRoot, "svc-")
		if err != nil {
			processWork.err = err
			return
		}
		// The descriptor stays open, and with it the lock, for the
		// process's lifetime: the kernel drops both when it dies.
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		}
		if err != nil {
			os.Remove(dir)
			processWork.err = fmt.Errorf("lock work directory %s: %w", dir, err)
			return
		}
		processWork.dir = dir
	})
	return processWork.dir, processWork.err
}

// newWorkDir makes a directory for one request (prefix names its kind)
// in this process's work directory.
func newWorkDir(prefix string) (string, error) {
	root, err := workDir()
	if err != nil {
		return "", err
	}
	return os.MkdirTemp(root, prefix)
}

// RemoveWork removes this process's work directory, once its requests
// are done (a service that stops; one that dies leaves it to SweepWork).
func RemoveWork() error {
	if processWork.dir == "" {
		return nil
	}
	return isolate.RemoveTree(processWork.dir)
}

// SweepWork removes the work directories of services that are gone:
// those whose lock no live process holds.
func SweepWork() error {
	ents, err := os.ReadDir(workRoot)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		path := filepath.Join(workRoot, e.Name())
		if e.IsDir() && path == processWork.dir {
			continue
		}
		if e.IsDir() && locked(path) {
			continue // a live service's
		}
		if err := isolate.RemoveTree(path); err != nil {
			return err
		}
	}
	return nil
}

// locked tells whether a live process holds dir's lock.
func locked(dir string) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == unix.EWOULDBLOCK
}

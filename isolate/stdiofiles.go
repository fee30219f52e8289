package isolate

import (
	"errors"
	"os"
)

// The host files a caller names for a run's standard streams (the CLI's
// --stdin, --stdout, --stderr). A front end opens them with these and
// hands them to Run as *os.File in IO; every such open is here, so that
// it is made safe in one place.

// OpenStdin opens the caller's file path as a program's standard input.
// A missing file or a directory is a *UsageError.
func OpenStdin(path string) (*os.File, error) {
	if fi, err := os.Stat(path); err != nil {
		return nil, usagef("--stdin %s: %v", path, errors.Unwrap(err))
	} else if fi.IsDir() {
		return nil, usagef("--stdin %s: is a directory", path)
	}
	f, err := openCallerPath(path, true)
	if err != nil {
		return nil, usagef("open stdin %v", err)
	}
	return f, nil
}

// openCallerPath opens the caller's file with the caller's rights (this
// process's), never through a symlink in its last component: see
// openOutput and openInput.
func openCallerPath(path string, input bool) (f *os.File, err error) {
	err = withFSThread(func(t *fsThread) error {
		caller := ownCred()
		h, err := openHostPath(t, caller, path)
		if err != nil {
			return err
		}
		defer h.close()
		if input {
			f, err = openInput(t, caller, h)
		} else {
			f, err = openOutput(t, caller, h, streamsAllow)
		}
		return err
	})
	return f, err
}

// CheckOutput tells whether path can be a program's output file, without
// creating it: a directory, or a missing parent directory, is a
// *UsageError.
func CheckOutput(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return usagef("output file %s is a directory", path)
	}
	if _, err := os.Stat(dirOf(path)); err != nil {
		return usagef("output file %s: directory %s does not exist", path, dirOf(path))
	}
	return nil
}

// CreateOutput creates (or truncates) the caller's file path for a
// program's standard output or error.
func CreateOutput(path string) (*os.File, error) {
	if err := CheckOutput(path); err != nil {
		return nil, err
	}
	return openCallerPath(path, false)
}

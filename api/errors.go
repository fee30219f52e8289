package api

import (
	"errors"
	"strconv"
	"syscall"
)

// UsageError is bad input: the CLI prints it and exits 2, the service
// answers 400, and nothing was created.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// StepError is a failed step of building the box or starting the
// program, as the sandbox's init reported it: the step's name, the errno
// (0 when there is none) and the text.
type StepError struct {
	Step  string
	Errno int
	Msg   string
}

// Error reads "step: text (errno N)".
func (e *StepError) Error() string {
	s := e.Step + ": " + e.Msg
	if e.Errno != 0 {
		s += " (errno " + strconv.Itoa(e.Errno) + ")"
	}
	return s
}

// Unwrap gives the errno, for errors.Is(err, syscall.ENOENT).
func (e *StepError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return syscall.Errno(e.Errno)
}

// ErrSessionEnded is returned by a session's methods, and by its code
// contexts' calls, once it has ended.
var ErrSessionEnded = errors.New("the session has ended")

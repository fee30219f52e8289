package isolate

// A session: one box that lives across calls. Its init stays PID 1 and
// starts each command the supervisor sends as a fresh process in the same
// namespaces, file system and cgroup (init_session.c); the box ends when
// the session is closed, its init dies, or the service ends.

import (
	"context"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate/codecontext"
)

// ErrSessionEnded is returned by a session's methods once it has ended.
var ErrSessionEnded = api.ErrSessionEnded

// SessionCommand is one command run in a session. Its process is fresh;
// the box, its files and the processes left running are the session's.
type SessionCommand struct {
	Args []string
	// Env is the command's whole environment; nil: the session's.
	Env []string
	// Cwd is its working directory inside the box ("": /box).
	Cwd string
	// WallTime ends the command (its process group) after this long; 0:
	// no limit (a background command runs until it ends, is signalled, or
	// the session ends).
	WallTime time.Duration
	// CPUTime bounds the CPU time of each of its processes (RLIMIT_CPU,
	// in whole seconds, rounded up: SIGXCPU there, SIGKILL a second
	// later); a command ended by it is TO (limit cpu). 0: none. The session's processes share one cgroup, so
	// this is the command's own bound, not the session's.
	CPUTime time.Duration
	// StderrToStdout sends its standard error to its standard output.
	StderrToStdout bool
	// OutputLimit bounds the bytes kept per captured stream, its first
	// and its last half with the cut marked between; 0: the session's
	// output limit.
	OutputLimit int64
}

// SessionUsage is what a session's box has used so far, from its cgroup.
type SessionUsage struct {
	CPUTime     time.Duration
	MemoryBytes int64 // now
	MemoryPeak  int64 // so far
	Pids        int64 // now
	PidsPeak    int64
	OOMKills    int64
}

// FileInfo describes one file of a session's box.
type FileInfo struct {
	Name    string      `json:"name"`
	Path    string      `json:"path"` // inside the box
	Size    int64       `json:"size"`
	Mode    os.FileMode `json:"mode"`
	IsDir   bool        `json:"is_dir"`
	ModTime time.Time   `json:"mod_time"`
}

// StartSession builds a box that lives until Close. spec is a run's
// (image or language, net, env, seccomp, limits); its args are ignored:
// each command brings its own. memory_bytes, pids and cpus bound the
// session as a whole (its cgroup); tmp_size_bytes is the size of its /box
// and /tmp; the rlimits apply to each command. ctx bounds the start only.
func (h *Host) StartSession(ctx context.Context, spec *api.Spec) (*Session, error) {
	return h.startSession(ctx, spec)
}

// Start starts cmd in the session's box with its streams under IO's rule
// (Run's): a nil stdout or stderr is captured into the process's report.
// It returns once the process runs (or could not be started: Wait then
// says why, as RE 127).
func (s *Session) Start(cmd SessionCommand, stdio IO) (*Process, error) { return s.start(cmd, stdio) }

// Run starts cmd and waits for it.
func (s *Session) Run(cmd SessionCommand, stdio IO) (*api.Report, error) {
	p, err := s.Start(cmd, stdio)
	if err != nil {
		return nil, err
	}
	return p.Wait(), nil
}

// Process is a command running in a session.
type Process struct{ proc }

// ID is the process's number in its session (1, 2, ...).
func (p *Process) ID() uint64 { return p.id }

// Signal sends sig to the process's group (the command and what it
// started, unless they left its group).
func (p *Process) Signal(sig syscall.Signal) error { return p.signal(sig) }

// Done is closed once the process has ended and its report is complete.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to end and returns its report: its exit,
// its own CPU time (its rusage and its waited-for children's), wall time,
// captured output, and the session's memory and pids peaks so far. A
// process killed because the session ended is XX.
func (p *Process) Wait() *api.Report {
	<-p.done
	return p.report
}

// Usage reads what the session has used so far.
func (s *Session) Usage() (SessionUsage, error) { return s.usage() }

// Done is closed once the session has ended (Close, or its box died);
// Err then says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended, nil while it lives and after Close.
func (s *Session) Err() error { return s.err() }

// Close ends the session: every process in it is killed, the box, its
// cgroup and its box id are gone when Close returns.
func (s *Session) Close() error { return s.close() }

// The box's files, as the box user sees them, resolved inside the box
// (symlinks cannot lead out of it): a relative path is relative to /box.
// Every operation is bounded (bytes by the box's own file system, entries
// of a listing by maxEntries).

// WriteFile creates or replaces path with what r holds, making missing
// directories; the box user owns it. It returns the bytes written.
func (s *Session) WriteFile(path string, r io.Reader, mode os.FileMode) (int64, error) {
	return s.writeFile(path, r, mode)
}

// OpenFile opens the regular file path for reading (never a FIFO, device
// or socket); the caller closes it.
func (s *Session) OpenFile(path string) (*os.File, FileInfo, error) { return s.openFile(path) }

// Stat describes path (a symlink itself, not followed).
func (s *Session) Stat(path string) (FileInfo, error) { return s.stat(path) }

// List describes the entries of directory path, at most maxEntries
// (more is an error).
func (s *Session) List(path string, maxEntries int) ([]FileInfo, error) {
	return s.list(path, maxEntries)
}

// Remove removes path, a directory with everything in it.
func (s *Session) Remove(path string) error { return s.remove(path) }

// NewCodeContext starts an interpreter for language (one of CodeLanguages,
// "" for python) in the session; it needs the language's program (python3,
// node, bash) in the session's image.
func (s *Session) NewCodeContext(language string) (*codecontext.CodeContext, error) {
	return codecontext.New(language, s.sessionOutputLimit(), s.Done(),
		func(args []string, stdin, stdout *os.File) (codecontext.Process, error) {
			// The driver's own stderr is captured: its last words, when
			// it dies.
			return s.Start(SessionCommand{Args: args, OutputLimit: 4 << 10}, IO{Stdin: stdin, Stdout: stdout})
		})
}

// sessionOutputLimit is the session's output_limit_bytes.
func (s *Session) sessionOutputLimit() int64 { return s.sv.spec.OutputLimit }

package isolate

import (
	"os"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate/egress"

	"github.com/isolate-sandbox/isolate/rootfs"
)

// Spec is the runtime's form of a run: an api.Spec resolved against the
// host (Host.Prepare), or filled directly by a front end that needs more
// than a request can say (the ioi form: directory rules, a persistent
// box's directory). Zero values mean "no limit" unless noted. Standard
// streams are not here: they are IO, given to Prepared.Run.
type Spec struct {
	Command []string // program and arguments, looked up in the box's PATH
	BoxID   int      // -1: pick a free box

	Image    string // "host" (default) or an image directory
	ImageDir string // resolved root of the image ("/" for host)
	// ImageFile is a squashfs image mounted for this run alone (see
	// rootfs.MountSquashfs); ImageMount one the caller mounted and shares
	// between runs. Either replaces ImageDir.
	ImageFile  string
	ImageMount *rootfs.Mounted
	// ImageTree, for a built image, is its unpacked tree (ImageDir), held
	// unchanged until the caller closes it after the run.
	ImageTree *rootfs.Tree

	CPUTime   time.Duration // CPU time of all processes and threads
	WallTime  time.Duration
	ExtraTime time.Duration // kill only after CPUTime+ExtraTime

	Memory    int64   // bytes, cgroup
	Pids      int64   // processes and threads at once
	CPUs      float64 // CPU bandwidth
	FileSize  int64   // RLIMIT_FSIZE
	TmpSize   int64   // size of /box and /tmp
	OpenFiles int64   // RLIMIT_NOFILE
	Stack     int64   // RLIMIT_STACK; StackAsHard: the hard limit init has
	AddrSpace int64   // RLIMIT_AS (ioi's -m); 0: none
	// MemoryRlimit is how Memory is bounded where rlimits alone enforce
	// the limits (a language's rule): MemoryRlimitAS ("" too),
	// MemoryRlimitData or MemoryRlimitNone.
	MemoryRlimit string
	// MemoryRlimitFactor multiplies Memory for that rlimit (0: 1).
	MemoryRlimitFactor float64

	OutputLimit int64 // bytes kept per captured stream
	// OutputHeadTail keeps the first and the last half of OutputLimit,
	// the cut marked (headtail.CutMarker), rather than the first bytes.
	OutputHeadTail bool

	Binds   []Bind
	CopyIn  []Copy
	CopyOut []Copy
	// CopyOutLimit bounds the data bytes (holes are free) all copy-outs
	// of the run write on the host; 0: TmpSize.
	CopyOutLimit int64
	// Caller is whose rights the run's host paths (--stdin, --stdout,
	// --stderr, --copy-in sources, --copy-out destinations) are opened
	// with; nil: this process's own.
	Caller *Cred

	Env     []string // the program's whole environment, NAME=VALUE
	HostNet bool     // share the host's network namespace
	// Egress is what a box in its own network namespace may reach
	// through a proxy outside it (nil: nothing but its loopback).
	Egress *egress.Policy
	// StderrToStdout sends the program's standard error to its standard
	// output.
	StderrToStdout bool
	Chdir          string // working directory inside ("" = /box)
	Seccomp        string // "default", "none" or a profile path
	// NoSyscallReport: the caller's output shows no blocked system calls
	// (the ioi form's meta file has no field for them), so the run pays
	// for no listener: the same policy answers refused calls with EPERM
	// itself, and the report's BlockedSyscalls stays empty.
	NoSyscallReport bool

	// BoxDir is the host directory of a persistent box, bound as /box.
	BoxDir string
	// BoxMount, instead, is a detached file system (rootfs.MountTmpfs)
	// the caller shares between runs, bound as /box: exec's compile and
	// run see one /box that is on no host path.
	BoxMount *rootfs.Mounted
}

// Bind is a host path bound into the box, as the file-system plan takes
// it (with ioi/isolate's directory options).
type Bind = rootfs.Bind

// Copy is a file or directory copied into the box before the run, or out
// of it after: between the caller's host path and the box's, or, given
// as data (IO.CopyIn, IO.CopyOut), between the front end and the box.
type Copy struct {
	From string
	To   string
	// Content, for a copy-in given as data, is read into the box's file
	// To, created with mode Mode (0: 0644) as the box user's; From is
	// unused.
	Content interface{ Read([]byte) (int, error) }
	Mode    os.FileMode
	// Sink, for a copy-out taken as data, is given the box's file From,
	// open for reading (a regular file: a directory, FIFO or device is
	// an error), and its size; To is unused. It runs with the
	// supervisor's own rights, on a thread of its own, within the run's
	// copy-out time.
	Sink func(f *os.File, size int64) error
}

// StackAsHard as a Spec's Stack raises the program's RLIMIT_STACK to
// the hard limit the box's init inherited (RLIM_INFINITY if that is
// unlimited, which also gives threads glibc's default stack size): the
// ioi form's default. Init sets it in the program alone, since raising
// the supervisor's own would change every later run of its process.
const StackAsHard int64 = -1

// Defaults are the contract's defaults for a run.
func Defaults() Spec {
	return Spec{
		BoxID:       -1,
		Image:       "host",
		ImageDir:    "/",
		Memory:      512 << 20,
		Pids:        64,
		FileSize:    64 << 20,
		TmpSize:     64 << 20,
		OpenFiles:   256,
		Stack:       8 << 20,
		OutputLimit: 1 << 20,
		Seccomp:     "default",
		Chdir:       "/box",
	}
}

// BaseEnv is the environment every program starts from.
var BaseEnv = api.BaseEnv

// effectiveWall is the wall-clock limit of a run.
func (s *Spec) effectiveWall() time.Duration {
	if s.WallTime > 0 {
		return s.WallTime
	}
	if s.CPUTime > 0 {
		return 2*(s.CPUTime+s.ExtraTime) + time.Second
	}
	return 60 * time.Second
}

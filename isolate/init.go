package isolate

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/seccomp"
)

// MaybeInit turns this process into a box's init when it was started as
// one, and then never returns. Call it first thing in main and TestMain.
func MaybeInit() {
	if len(os.Args) > 1 && os.Args[1] == InitArg {
		os.Exit(initMain())
	}
}

// boxInit is the state of init, PID 1 of the box's namespaces.
type boxInit struct {
	cfg    initConfig
	clock  initClock
	ctl    *bufio.Reader
	status *os.File
}

func initMain() int {
	// Everything the supervisor passed is for init alone: nothing beyond
	// 0, 1 and 2 may reach the program.
	unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	in := &boxInit{
		clock:  newInitClock(),
		ctl:    bufio.NewReader(os.NewFile(fdControl, "control")),
		status: os.NewFile(fdStatus, "status"),
	}
	line, err := in.ctl.ReadBytes('\n')
	if err != nil {
		return in.fail("read config", err)
	}
	if err := json.Unmarshal(line, &in.cfg); err != nil {
		return in.fail("decode config", err)
	}
	in.clock.mark("init-config")
	if err := in.prepare(); err != nil {
		var se *rootfs.StepError
		if errors.As(err, &se) {
			return in.fail(se.Step, se.Err)
		}
		return in.fail("prepare box", err)
	}
	if in.cfg.WaitForGo {
		in.send(initMessage{Type: msgReady})
		if b, err := in.ctl.ReadByte(); err != nil || b != ctlGo {
			return 1 // the supervisor gave up
		}
	}
	exited := make(chan initMessage, 1)
	go in.runProgram(exited)
	eof := make(chan struct{})
	go in.serveControl(eof)
	select {
	case msg := <-exited:
		in.send(msg)
	case <-eof:
		// The supervisor is gone: take everything down with us.
		syscall.Kill(-1, syscall.SIGKILL)
		return 1
	}
	<-eof // the supervisor has copied out what it wanted
	return 0
}

// prepare builds the box around init: network, host name, the limit on
// new user namespaces, the file system.
func (in *boxInit) prepare() error {
	if in.cfg.Loopback {
		if err := loopbackUp(); err != nil {
			return &rootfs.StepError{Step: "bring up loopback", Err: err}
		}
	}
	in.clock.mark("init-net")
	if err := unix.Sethostname([]byte("isolate")); err != nil {
		return &rootfs.StepError{Step: "set host name", Err: err}
	}
	// With no capabilities the program can only create namespaces by
	// first creating a user namespace; forbid that outright, whatever
	// clone flags a syscall filter can or cannot see.
	if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0"), 0); err != nil {
		return &rootfs.StepError{Step: "forbid nested user namespaces", Err: err}
	}
	in.clock.mark("init-uts+userns")
	err := rootfs.Assemble(&in.cfg.Layout)
	in.clock.mark("init-fs")
	return err
}

// runProgram starts the program and reaps the box. It owns one OS thread
// for good: on cgroup v1 that thread joins the box's cgroups so that the
// program is born inside them, and it carries the syscall filter the
// program inherits. The Go runtime never clones a thread that user code
// locked, so neither leaks to init's other threads; the thread dies with
// the goroutine.
func (in *boxInit) runProgram(exited chan<- initMessage) {
	runtime.LockOSThread()
	cfg := &in.cfg
	for i := 0; i < cfg.CgroupFiles; i++ {
		f := os.NewFile(uintptr(fdCgroup+i), "tasks")
		if _, err := f.Write([]byte("0")); err != nil {
			in.fail("join cgroup", err)
			os.Exit(1)
		}
		f.Close()
	}
	restore, err := setRlimits(cfg.Rlimits)
	if err != nil {
		in.fail("set resource limits", err)
		os.Exit(1)
	}
	if err := dropBoundingSet(); err != nil {
		in.fail("drop capability bounding set", err)
		os.Exit(1)
	}
	// no_new_privs on this thread, whatever the syscall policy: setuid
	// binaries of the image cannot raise the program's privileges.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		in.fail("set no_new_privs", err)
		os.Exit(1)
	}
	in.clock.mark("init-cgroup+rlimits+caps")
	notifyFD := -1
	if cfg.Seccomp != nil {
		if notifyFD, err = seccomp.Install(cfg.Seccomp, cfg.Notify); err != nil {
			in.fail("load seccomp filter", err)
			os.Exit(1)
		}
	}
	in.clock.mark("init-seccomp")
	files := []uintptr{0, 1, 2}
	if cfg.StderrToStdout {
		files[2] = 1
	}
	attr := &syscall.ProcAttr{
		Dir:   cfg.Dir,
		Env:   cfg.Env,
		Files: files,
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Credential: &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), Groups: []uint32{}},
		},
	}
	if cfg.CgroupDir {
		attr.Sys.UseCgroupFD = true
		attr.Sys.CgroupFD = fdCgroup
	}
	path, lookErr := lookPath(cfg.Argv[0], cfg.Env)
	start := time.Now()
	pid, err := 0, lookErr
	if err == nil {
		pid, err = syscall.ForkExec(path, cfg.Argv, attr)
	}
	restore()
	if err != nil {
		// The program could not be executed: like a shell, report 127.
		exited <- initMessage{Type: msgExited, WaitStatus: exitCannotExec << 8, ExecErr: cfg.Argv[0] + ": " + err.Error()}
		return
	}
	in.clock.mark("init-exec")
	in.send(initMessage{Type: msgStarted, NotifyFD: notifyFD, Stages: in.clock.stages})
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	msg := initMessage{Type: msgExited}
	for {
		var w syscall.WaitStatus
		var r syscall.Rusage
		wpid, err := syscall.Wait4(-1, &w, 0, &r)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			break // ECHILD: everything is reaped
		}
		if wpid == pid {
			ws, ru = w, r
			msg.WallNs = int64(time.Since(start))
			// The program is done: so is everything it left behind.
			syscall.Kill(-1, syscall.SIGKILL)
		}
	}
	msg.WaitStatus = uint32(ws)
	msg.UserNs = syscall.TimevalToNsec(ru.Utime)
	msg.SysNs = syscall.TimevalToNsec(ru.Stime)
	msg.MaxRSS = ru.Maxrss
	msg.NVCSW = ru.Nvcsw
	msg.NIVCSW = ru.Nivcsw
	exited <- msg
}

// initClock times init's steps: the first one from the process's start.
type initClock struct {
	last   time.Time
	stages map[string]int64
}

func newInitClock() initClock {
	start := time.Now()
	var st unix.Stat_t
	// /proc/self's change time is when this process started: the first
	// stage includes the Go runtime's own start-up.
	if unix.Stat("/proc/self", &st) == nil {
		start = time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	}
	return initClock{last: start, stages: map[string]int64{}}
}

func (c *initClock) mark(name string) {
	now := time.Now()
	c.stages[name] = int64(now.Sub(c.last))
	c.last = now
}

// serveControl acts on the supervisor's control bytes until it closes the
// pipe.
func (in *boxInit) serveControl(eof chan<- struct{}) {
	for {
		b, err := in.ctl.ReadByte()
		if err != nil {
			close(eof)
			return
		}
		if b == ctlKill {
			syscall.Kill(-1, syscall.SIGKILL)
		}
	}
}

func (in *boxInit) send(m initMessage) {
	data, _ := json.Marshal(m)
	in.status.Write(append(data, '\n'))
}

// fail reports a failed step to the supervisor and returns init's exit
// status.
func (in *boxInit) fail(step string, err error) int {
	m := initMessage{Type: msgError, Step: step, Err: err.Error()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		m.Errno = int(errno)
	}
	in.send(m)
	return 1
}

// setRlimits applies the program's resource limits to init, whose fork
// passes them on. The address-space limit would starve init's own
// runtime, so restore puts it back once the program is started.
func setRlimits(limits []rlimit) (restore func(), err error) {
	var undo []func()
	restore = func() {
		for _, f := range undo {
			f()
		}
	}
	for _, l := range limits {
		if l.Resource == unix.RLIMIT_AS {
			var old syscall.Rlimit
			syscall.Getrlimit(l.Resource, &old)
			res := l.Resource
			undo = append(undo, func() { syscall.Setrlimit(res, &old) })
		}
		// syscall.Setrlimit (not unix.) so that the runtime does not
		// restore its own RLIMIT_NOFILE in the child.
		if err := syscall.Setrlimit(l.Resource, &syscall.Rlimit{Cur: l.Value, Max: l.Value}); err != nil {
			restore()
			return func() {}, err
		}
	}
	return restore, nil
}

// dropBoundingSet empties the capability bounding set of this thread (and
// so of the program), on top of the program running as a non-root user
// with no_new_privs.
func dropBoundingSet() error {
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if err == unix.EINVAL {
				break // past the last capability this kernel knows
			}
			return err
		}
	}
	return unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
}

// lookPath finds file in the PATH of the program's environment, inside the
// box.
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("command not found")
}

// loopbackUp brings up lo in the box's own network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

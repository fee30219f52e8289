package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Images mounted per run cost every run a cold superblock: squashfs
// decompresses again each file the program touches (measured: +20 ms of
// wall time and +18 ms of the program's own CPU time for a Python start,
// see docs/LANGUAGES.md). A host that runs boxes back to back can keep an
// image warm instead: with ISOLATE_IMAGE_LINGER=DUR, a small holder
// process (the isolate binary, detached) keeps the detached mount for DUR
// after the last run that asked for it, and hands its descriptor to every
// run meanwhile, so they all share one superblock and its page cache. The
// holder is never in a mount table either; when it exits, the last box
// that used the image drops the mount and the kernel detaches the loop
// device. `isolate image rm` and rebuilds end the holders of the old file.
// The default, 0, keeps no holder: nothing outlives a run.

// LingerEnv names the variable that sets how long images stay warm.
const LingerEnv = "ISOLATE_IMAGE_LINGER"

// HolderArgv is the command line (after the binary) that runs HoldImage
// for path: the CLI sets it, rootfs knows nothing of commands.
var HolderArgv func(path string, linger time.Duration) []string

// Linger reads ISOLATE_IMAGE_LINGER: seconds ("30") or a Go duration.
func Linger() (time.Duration, error) {
	v := strings.TrimSpace(os.Getenv(LingerEnv))
	if v == "" || v == "0" {
		return 0, nil
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: not a duration", LingerEnv, v)
	}
	return d, nil
}

// OpenImage mounts the squashfs image at path for a run: its own mount
// when images do not linger, else the warm one of the image's holder.
func OpenImage(path string) (*Mounted, error) {
	linger, err := Linger()
	if err != nil {
		return nil, err
	}
	if linger == 0 || HolderArgv == nil {
		return MountSquashfs(path)
	}
	key, err := imageKey(path)
	if err != nil {
		return nil, err
	}
	if m, err := fetchMount(key); err == nil {
		return m, nil
	}
	if err := startHolder(path, linger); err != nil {
		return nil, err
	}
	m, err := fetchMount(key)
	if err != nil {
		return nil, fmt.Errorf("take the image from its holder: %w", err)
	}
	return m, nil
}

// imageKey names one version of an image file: a rebuilt image (a new
// file) gets a new holder.
func imageKey(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Stat(abs, &st); err != nil {
		return "", err
	}
	h := sha256.Sum256([]byte(fmt.Sprintf("%s %d %d %d %d", abs, st.Dev, st.Ino, st.Size, st.Mtim.Nano())))
	return hex.EncodeToString(h[:8]), nil
}

func holderAddr(key string) *unix.SockaddrUnix {
	return &unix.SockaddrUnix{Name: "@isolate/image/" + key}
}

// Requests to a holder: one byte.
const (
	holderGet  = 'g' // send me the mount
	holderQuit = 'q' // the image is gone: stop lingering
)

// ask connects to the holder of key and sends a request.
func ask(key string, req byte) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, holderAddr(key)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if _, err := unix.Write(fd, []byte{req}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// fetchMount asks the holder of key for the image's mount.
func fetchMount(key string) (*Mounted, error) {
	fd, err := ask(key, holderGet)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("the holder sent no mount (%q)", buf[:n])
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("the holder sent no mount (%v)", err)
	}
	return &Mounted{file: os.NewFile(uintptr(fds[0]), "image"), Device: string(buf[:n])}, nil
}

// startHolder starts a holder for path and waits until it serves (or
// another, started at the same time, does).
func startHolder(path string, linger time.Duration) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(self, HolderArgv(path, linger)...)
	cmd.Dir = "/"
	cmd.Env = []string{}
	if d := os.Getenv("GOCOVERDIR"); d != "" {
		cmd.Env = append(cmd.Env, "GOCOVERDIR="+d) // coverage builds of the tests
	}
	// Its own session, no terminal, nothing of the caller's streams: it
	// outlives the run that started it.
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start the image holder: %w", err)
	}
	w.Close()
	go cmd.Wait()
	msg := make([]byte, 512)
	n, _ := r.Read(msg)
	if s := string(msg[:n]); s != "ok" {
		return fmt.Errorf("image holder: %s", strings.TrimSpace(s))
	}
	return nil
}

// HoldImage is the holder: it mounts path, serves the mount to root's
// runs on the image's socket, and exits linger after the last request (at
// once on holderQuit). ready (fd 3) gets "ok" or the error.
func HoldImage(path string, linger time.Duration) error {
	ready := os.NewFile(3, "ready")
	err := holdImage(path, linger, ready)
	if err != nil {
		ready.WriteString(err.Error())
	}
	ready.Close()
	return err
}

func holdImage(path string, linger time.Duration, ready *os.File) error {
	key, err := imageKey(path)
	if err != nil {
		return err
	}
	ln, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, holderAddr(key)); err != nil {
		if errors.Is(err, unix.EADDRINUSE) {
			ready.WriteString("ok") // another holder serves it
			ready.Close()
			return nil
		}
		return fmt.Errorf("bind the image socket: %w", err)
	}
	if err := unix.Listen(ln, 64); err != nil {
		return err
	}
	m, err := MountSquashfs(path)
	if err != nil {
		return err
	}
	defer m.Close()
	ready.WriteString("ok")
	ready.Close()
	deadline := time.Now().Add(linger)
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil
		}
		pfd := []unix.PollFd{{Fd: int32(ln), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, int(wait/time.Millisecond)+1)
		if err != nil && err != unix.EINTR {
			return err
		}
		if n <= 0 {
			continue
		}
		c, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
		if err != nil {
			continue
		}
		switch serve(c, m) {
		case holderGet:
			deadline = time.Now().Add(linger)
		case holderQuit:
			return nil
		}
	}
}

// serve answers one request of root's; it returns the request.
func serve(c int, m *Mounted) byte {
	defer unix.Close(c)
	cred, err := unix.GetsockoptUcred(c, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil || cred.Uid != 0 {
		return 0 // the mount is root's runs' alone
	}
	unix.SetsockoptTimeval(c, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1})
	req := make([]byte, 1)
	if n, err := unix.Read(c, req); err != nil || n != 1 {
		return 0
	}
	if req[0] == holderGet {
		rights := unix.UnixRights(int(m.file.Fd()))
		unix.Sendmsg(c, []byte(m.Device), rights, nil, 0)
	}
	return req[0]
}

// ReleaseHolder tells the holder of the image at path, if any, to stop
// lingering: the mount goes with the last box that uses it.
func ReleaseHolder(path string) {
	key, err := imageKey(path)
	if err != nil {
		return
	}
	if fd, err := ask(key, holderQuit); err == nil {
		unix.Close(fd)
	}
}

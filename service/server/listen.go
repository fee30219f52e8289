package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/internal/connlimit"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// DefaultSocket is where the service listens by default.
const DefaultSocket = "/run/isolate/api.sock"

// ListenUnix listens on a unix socket at path, owned by root and group
// gid (-1: root's group), mode 0660: only root and that group may
// connect. In a process that is not root (a service of a user's own) it
// is the user's, mode 0600, and gid must be -1: only the user may
// connect. A socket left by a service that died is replaced; one that
// answers belongs to a running service and is an error.
func ListenUnix(path string, gid int) (*net.UnixListener, error) {
	own := os.Geteuid() != 0
	if own && gid >= 0 {
		return nil, errors.New("a socket group needs a service run by root")
	}
	dirMode := os.FileMode(0o755)
	if own {
		dirMode = 0o700
	}
	if err := os.MkdirAll(dirOf(path), dirMode); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another service is listening there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	l, err := listenOwnerOnly(path)
	if err != nil {
		return nil, err
	}
	if own {
		return l, nil // listenOwnerOnly made it 0600, the user's
	}
	if gid < 0 {
		gid = 0
	}
	if err := os.Lchown(path, 0, gid); err != nil {
		l.Close()
		return nil, err
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func dirOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return "."
}

type callerKey struct{}

// connContext records who is at the other end of each connection: on the
// unix socket, the kernel says; over TCP nobody does.
func connContext(ctx context.Context, c net.Conn) context.Context {
	who := caller.Unknown
	var cred *unix.Ucred
	if lc, ok := c.(*connlimit.Conn); ok {
		ctx = context.WithValue(ctx, connKey{}, lc)
		c, cred = lc.NetConn(), lc.Cred // as accepted, under the connection limits
	}
	if uc, ok := c.(*net.UnixConn); ok {
		if raw, err := uc.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				if cl, err := caller.FromSocket(int(fd), cred, caller.API); err == nil {
					who = cl
				}
			})
		}
	}
	return context.WithValue(ctx, callerKey{}, who)
}

// connKey is a request's connection in its context (*connlimit.Conn).
type connKey struct{}

func callerOf(r *http.Request) caller.Caller {
	if c, ok := r.Context().Value(callerKey{}).(caller.Caller); ok {
		return c
	}
	return caller.Unknown
}

// requireToken lets through only requests that carry the bearer token,
// compared in constant time.
func requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			// Its connection stays nobody's, and goes.
			w.Header().Set("Connection", "close")
			w.Header().Set("WWW-Authenticate", `Bearer realm="isolate"`)
			writeError(w, http.StatusUnauthorized, errors.New("a bearer token is required (Authorization: Bearer TOKEN)"))
			return
		}
		// The connection is the token's from now on: counted against the
		// token's share, not its address's (connlimit).
		if lc, ok := r.Context().Value(connKey{}).(*connlimit.Conn); ok && !lc.Authenticate(callerOf(r).Account()) {
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusTooManyRequests, errors.New("this token holds its --max-conns-per-uid connections, all busy"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// listenOwnerOnly listens on a new unix socket at path that only its
// owner may connect to, at no moment wider: the socket's own inode is
// made 0600 before bind(2), which gives the file that mode (less the
// umask). The process's umask, shared by everything in it, is not
// touched.
func listenOwnerOnly(path string) (*net.UnixListener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // the listener holds a descriptor of its own
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return nil, os.NewSyscallError("fchmod", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return nil, &net.OpError{Op: "listen", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"}, Err: os.NewSyscallError("bind", err)}
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		os.Remove(path)
		return nil, os.NewSyscallError("listen", err)
	}
	fl, err := net.FileListener(f)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	l := fl.(*net.UnixListener)
	// As net.ListenUnix's: closing it removes the socket file.
	l.SetUnlinkOnClose(true)
	return l, nil
}

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
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultSocket is where the service listens by default.
const DefaultSocket = "/run/isolate/api.sock"

// ListenUnix listens on a unix socket at path, owned by root and group
// gid (-1: root's group), mode 0660: only root and that group may
// connect. A socket left by a service that died is replaced; one that
// answers belongs to a running service and is an error.
func ListenUnix(path string, gid int) (*net.UnixListener, error) {
	if err := os.MkdirAll(dirOf(path), 0o755); err != nil {
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
	// No moment when the socket exists with a wider mode: bind under a
	// umask that leaves only the owner, then open it to the group.
	old := unix.Umask(0o177)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, err
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

// Caller is who sent a request. Over the unix socket the kernel says
// (SO_PEERCRED); over TCP nobody does, and the caller has a token only.
type Caller struct {
	UID, GID int
	PID      int
	Local    bool // connected over the unix socket: UID and GID are the kernel's
}

// Root is a caller with root's rights on the host: only it may name host
// paths (binds, image or seccomp profile paths, box ids).
func (c Caller) Root() bool { return c.Local && c.UID == 0 }

type callerKey struct{}

// connContext records the peer's credentials of each connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	caller := Caller{UID: -1, GID: -1, PID: -1}
	if lc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = lc.NetConn() // as accepted, under the connection limits
	}
	if uc, ok := c.(*net.UnixConn); ok {
		if raw, err := uc.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
				if err == nil {
					caller = Caller{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid), Local: true}
				}
			})
		}
	}
	return context.WithValue(ctx, callerKey{}, caller)
}

func callerOf(r *http.Request) Caller {
	if c, ok := r.Context().Value(callerKey{}).(Caller); ok {
		return c
	}
	return Caller{UID: -1, GID: -1, PID: -1}
}

// ReadToken reads a bearer token from path: a file only its owner may
// read (as ssh insists for keys), holding one non-empty line.
func ReadToken(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s: mode %04o lets others read it (chmod 600)", path, st.Mode().Perm())
	}
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	tok := strings.TrimSpace(string(b[:n]))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("token file %s: want one non-empty line", path)
	}
	return tok, nil
}

// requireToken lets through only requests that carry the bearer token,
// compared in constant time.
func requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="isolate"`)
			writeError(w, http.StatusUnauthorized, errors.New("a bearer token is required (Authorization: Bearer TOKEN)"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

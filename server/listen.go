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

	"github.com/isolate-sandbox/isolate/caller"
	"github.com/isolate-sandbox/isolate/internal/connlimit"
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

type callerKey struct{}

// connContext records who is at the other end of each connection: on the
// unix socket, the kernel says; over TCP nobody does.
func connContext(ctx context.Context, c net.Conn) context.Context {
	who := caller.Unknown
	var cred *unix.Ucred
	if lc, ok := c.(*connlimit.Conn); ok {
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

func callerOf(r *http.Request) caller.Caller {
	if c, ok := r.Context().Value(callerKey{}).(caller.Caller); ok {
		return c
	}
	return caller.Unknown
}

// ReadToken reads a bearer token from path (ReadSecret).
func ReadToken(path string) (string, error) {
	tok, err := ReadSecret(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	return tok, nil
}

// ReadSecret reads a secret from path: a file only its owner may read
// (as ssh insists for keys), holding one non-empty line.
func ReadSecret(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s: mode %04o lets others read it (chmod 600)", path, st.Mode().Perm())
	}
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	line := strings.TrimSpace(string(b[:n]))
	if line == "" || strings.ContainsAny(line, " \t\r\n") {
		return "", fmt.Errorf("%s: want one non-empty line", path)
	}
	return line, nil
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

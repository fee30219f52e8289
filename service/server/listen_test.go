package server

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// ownUmaskLine is this process's umask as /proc shows it.
func ownUmaskLine(t *testing.T) string {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Umask:") {
			return line
		}
	}
	t.Fatal("no Umask in /proc/self/status")
	return ""
}

// The socket is root's and the group's, mode 0660, replaces one a dead
// service left, goes with its listener, and the process's umask is
// never touched on the way.
func TestListenUnixModeAndUmask(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the socket is handed to root")
	}
	umask := ownUmaskLine(t)
	sock := filepath.Join(t.TempDir(), "api.sock")
	for round := range 2 {
		l, err := ListenUnix(sock, 65534)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(sock)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 || st.Uid != 0 || st.Gid != 65534 {
			t.Errorf("socket: mode %v, owner %d:%d; want a socket, 0660, 0:65534", fi.Mode(), st.Uid, st.Gid)
		}
		if round == 0 {
			// A dead service's socket: the file stays, nobody listens.
			l.SetUnlinkOnClose(false)
			l.Close()
			continue
		}
		l.Close()
		if _, err := os.Lstat(sock); !os.IsNotExist(err) {
			t.Errorf("the socket outlived its listener: %v", err)
		}
	}
	if got := ownUmaskLine(t); got != umask {
		t.Errorf("umask %q, before %q", got, umask)
	}
}

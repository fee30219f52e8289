package hostfs

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CheckStreamFD: what a caller's descriptor may be as a program's stream.
func TestCheckStreamFD(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "f")
	os.WriteFile(reg, []byte("x"), 0o644)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sock, _ := l.File()
	defer sock.Close()
	for _, c := range []struct {
		path string
		f    *os.File
		want string // "" : accepted; else a part of the refusal
	}{
		{path: reg},
		{path: "/dev/null"},
		{path: "/dev/zero"},
		{path: "/dev/urandom"},
		{path: "/dev/ptmx"}, // a terminal (its master side)
		{path: "pipe", f: r},
		{path: "socket", f: sock},
		{path: dir, want: "is a directory"},
		{path: "/proc", want: "is a directory"},
		{path: "/proc/self/status", want: "procfs"},
		{path: "/sys/kernel/uevent_seqnum", want: "sysfs"},
		{path: "/dev/kmsg", want: "not a terminal"},
		{path: "/dev/mem", want: "not a terminal"},
	} {
		f := c.f
		if f == nil {
			if f, err = os.Open(c.path); err != nil {
				t.Logf("%s: %v (skipped)", c.path, err)
				continue
			}
			defer f.Close()
		}
		err := CheckStreamFile(f)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", c.path, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want refused: %s", c.path, err, c.want)
		}
	}
}

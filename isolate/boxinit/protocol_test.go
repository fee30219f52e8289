package boxinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/rootfs"
)

// TestMain (host_test.go) dispatches init first: one test binary.

// quote renders s as init_io.c's render_str does.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			fmt.Fprintf(&b, "\\x%02x", c)
		} else {
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, " ")
}

// TestProtocolOps encodes every operation in Go and decodes it with
// init's reader, field for field, at the limits too.
func TestProtocolOps(t *testing.T) {
	binary := string([]byte{0, 1, 2, 0xff, '"', '\\', 'a', 0})
	big := strings.Repeat("x", 1<<20) + binary
	many := make([]string, 10000)
	for i := range many {
		many[i] = fmt.Sprint("arg", i)
	}
	many[17] = ""
	filter := make([]byte, 8*64)
	for i := range filter {
		filter[i] = byte(i)
	}
	const maxU64 = "18446744073709551615"
	fs := func(op rootfs.Op) func(*Plan) { return func(p *Plan) { p.FS([]rootfs.Op{op}) } }
	tests := []struct {
		name string
		enc  func(*Plan)
		want string
	}{
		{"place-fd", func(p *Plan) { p.PlaceFD(7) }, `place-fd step="place a descriptor" 7`},
		{"hostname", func(p *Plan) { p.Hostname("isolate") }, `hostname step="set host name" "isolate"`},
		{"hostname, empty", func(p *Plan) { p.Hostname("") }, `hostname step="set host name" ""`},
		{"loopback", func(p *Plan) { p.Loopback() }, `loopback step="bring up loopback"`},
		{"listen", func(p *Plan) { p.Listen(3128) }, `listen step="listen on the box's loopback for its network allowlist" 3128`},
		{"sysctl", func(p *Plan) { p.Sysctl("s", "/proc/sys/user/max_user_namespaces", "0") },
			`sysctl step="s" "/proc/sys/user/max_user_namespaces" "0"`},
		{"private", fs(rootfs.MakePrivate{Step: "make mounts private"}), `private step="make mounts private"`},
		{"mount", fs(rootfs.Mount{Step: "mount /tmp", Source: "tmpfs", Target: "/r/tmp", FSType: "tmpfs",
			Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777"}),
			fmt.Sprintf(`mount step="mount /tmp" %d "tmpfs" "/r/tmp" "tmpfs" "mode=1777"`, unix.MS_NOSUID|unix.MS_NODEV)},
		{"mount, empty strings", fs(rootfs.Mount{}), `mount step="" 0 "" "" "" ""`},
		{"mount, largest flags", fs(rootfs.Mount{Step: "m", Flags: math.MaxUint64}), `mount step="m" ` + maxU64 + ` "" "" "" ""`},
		{"move-mount", fs(rootfs.MoveMount{Step: "bind /data on /d", Tree: 9, Target: "/r/d"}), `move-mount step="bind /data on /d" 9 "/r/d"`},
		{"setattr", fs(rootfs.SetAttr{Step: "set", Path: "/r/usr", Attrs: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID, Recursive: true}),
			fmt.Sprintf(`setattr step="set" %d 1 "/r/usr"`, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID)},
		{"setattr, not recursive", fs(rootfs.SetAttr{Step: "set", Path: "/r/box"}), `setattr step="set" 0 0 "/r/box"`},
		{"mkdir", fs(rootfs.Mkdir{Step: "create /box", Path: "/r/box", Mode: 0o755}), `mkdir step="create /box" 493 "/r/box"`},
		{"touch", fs(rootfs.Touch{Step: "create /dev/null", Path: "/r/dev/null", Mode: 0o644}),
			`touch step="create /dev/null" 420 "/r/dev/null"`},
		{"symlink", fs(rootfs.Symlink{Step: "link /bin", Target: "usr/bin", Path: "/r/bin"}), `symlink step="link /bin" "usr/bin" "/r/bin"`},
		{"write", fs(rootfs.WriteFile{Step: "write /etc/hosts", Path: "/r/etc/hosts", Mode: 0o644, Content: "127.0.0.1\tlocalhost\n"}),
			`write step="write /etc/hosts" 420 "/r/etc/hosts" "127.0.0.1\x09localhost\x0a"`},
		{"write, binary and 1 MiB", fs(rootfs.WriteFile{Step: "w", Path: "/r/f", Mode: 0o7777, Content: big}),
			`write step="w" 4095 "/r/f" ` + quote(big)},
		{"write, empty", fs(rootfs.WriteFile{Step: "w", Path: "/r/f"}), `write step="w" 0 "/r/f" ""`},
		{"remount-ro", fs(rootfs.RemountRO{Step: "ro", Path: "/r"}), `remount-ro step="ro" "/r"`},
		{"pivot", fs(rootfs.Pivot{Step: "pivot_root", Root: "/r"}), `pivot step="pivot_root" "/r"`},
		{"prepare, listener", func(p *Plan) { p.Prepare(filter, true) },
			`prepare step="prepare the program's process" 1 ` + quote(string(filter))},
		{"prepare, no listener", func(p *Plan) { p.Prepare(filter[:8], false) },
			`prepare step="prepare the program's process" 0 ` + quote(string(filter[:8]))},
		{"session", func(p *Plan) { p.Session() }, `session step="serve a session"`},
		{"box-end", func(p *Plan) { p.BoxEnd(false) }, `box-end step="box built" 0`},
		{"box-end, announced", func(p *Plan) { p.BoxEnd(true) }, `box-end step="box built" 1`},
		{"argv", func(p *Plan) { p.Argv([]string{"/bin/sh", "-c", "echo \"hi\""}) },
			`argv step="program" "/bin/sh" "-c" "echo \x22hi\x22"`},
		{"argv, none", func(p *Plan) { p.Argv(nil) }, `argv step="program"`},
		{"argv, 10000 with an empty one", func(p *Plan) { p.Argv(many) }, `argv step="program" ` + quoteAll(many)},
		{"env", func(p *Plan) { p.Env([]string{"PATH=/usr/bin:/bin", "X=" + binary}) },
			`env step="environment" "PATH=/usr/bin:/bin" ` + quote("X="+binary)},
		{"dir", func(p *Plan) { p.Dir("/box") }, `dir step="working directory" "/box"`},
		{"cred", func(p *Plan) { p.Cred(1000, math.MaxUint32) }, `cred step="credentials" 1000 4294967295`},
		{"rlimit", func(p *Plan) { p.Rlimit(unix.RLIMIT_NOFILE, 256) }, fmt.Sprintf(`rlimit step="resource limit" %d 256`, unix.RLIMIT_NOFILE)},
		{"rlimit, infinity", func(p *Plan) { p.Rlimit(unix.RLIMIT_AS, unix.RLIM_INFINITY) },
			fmt.Sprintf(`rlimit step="resource limit" %d %s`, unix.RLIMIT_AS, maxU64)},
		{"cgroup", func(p *Plan) { p.CgroupTasks(7) }, `cgroup step="cgroup" 7`},
		{"cgroup-fork", func(p *Plan) { p.CgroupFork(0) }, `cgroup-fork step="cgroup" 0`},
		{"seccomp, listener", func(p *Plan) { p.Seccomp(filter, 5) }, `seccomp step="seccomp filter" 5 ` + quote(string(filter))},
		{"seccomp, no listener", func(p *Plan) { p.Seccomp(filter[:8], -1) }, `seccomp step="seccomp filter" ` + maxU64 + ` ` + quote(string(filter[:8]))},
		{"stdio", func(p *Plan) { p.Stdio(1, 2, -1) }, `stdio step="standard streams" 1 2 ` + maxU64},
		{"stderr-to-stdout", func(p *Plan) { p.StderrToStdout() }, `stderr-to-stdout step="stderr to stdout"`},
		{"hold", func(p *Plan) { p.Hold() }, `hold step="keep the box for copy-out"`},
		{"tell-start", func(p *Plan) { p.TellStart() }, `tell-start step="tell the start at once"`},
		{"command-id", func(p *Plan) { p.CommandID(math.MaxUint64) }, `command-id step="command number" ` + maxU64},
		{"hand-over", func(p *Plan) { p.HandOver(true, "/box", "/tmp") }, `hand-over step="hand over the box's directories" 1 "/box" "/tmp"`},
		{"hand-over, not back", func(p *Plan) { p.HandOver(false, "/box") }, `hand-over step="hand over the box's directories" 0 "/box"`},
		{"end", func(p *Plan) { p.End() }, `end step="end"`},
		{"signal", func(p *Plan) { p.Signal(3, int(unix.SIGTERM)) }, fmt.Sprintf(`signal step="signal" 3 %d`, unix.SIGTERM)},
	}
	covered := map[string]bool{}
	var all Plan
	var want []string
	for _, tt := range tests {
		p := &Plan{}
		tt.enc(p)
		got := strings.TrimSuffix(renderPlan(p.Buf), "\n")
		if got != tt.want {
			t.Errorf("%s:\n got %.300s\nwant %.300s", tt.name, got, tt.want)
		}
		covered[strings.Fields(tt.want)[0]] = true
		tt.enc(&all)
		want = append(want, tt.want)
	}
	// All in one stream: records end exactly where the next begins.
	if got := renderPlan(all.Buf); got != strings.Join(want, "\n")+"\n" {
		t.Errorf("the records in one plan decode differently from one by one")
	}
	for _, name := range opNames() {
		if !covered[name] {
			t.Errorf("operation %q of protocol.h has no case in this table", name)
		}
	}
}

// TestProtocolRefuses checks that init's reader refuses malformed records
// rather than guessing: unknown ops, wrong field counts, truncation,
// oversized strings.
func TestProtocolRefuses(t *testing.T) {
	rec := func(op, nints, nstrs uint32, rest ...byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, op)
		b = binary.LittleEndian.AppendUint32(b, nints)
		b = binary.LittleEndian.AppendUint32(b, nstrs)
		return append(b, rest...)
	}
	step := binary.LittleEndian.AppendUint32(nil, 1)
	step = append(step, 's')
	var mkdir Plan
	mkdir.FS([]rootfs.Op{rootfs.Mkdir{Step: "create /box", Path: "/r/box", Mode: 0o755}})
	ops := uint32(len(opNames()))
	tests := []struct {
		name string
		buf  []byte
		want string
	}{
		{"op 0", rec(0, 0, 0, step...), "error: unknown operation"},
		{"op past the last", rec(ops+1, 0, 0, step...), "error: unknown operation"},
		{"mkdir without its mode", rec(opCode(t, "mkdir"), 0, 1, step...), "error: wrong number of fields"},
		{"hostname with two strings", rec(opCode(t, "hostname"), 0, 2, step...), "error: wrong number of fields"},
		{"truncated record", mkdir.Buf[:len(mkdir.Buf)-1], "error: truncated record"},
		{"truncated header", mkdir.Buf[:5], "error: truncated record"},
		{"string over 64 MiB", rec(opCode(t, "loopback"), 0, 0, 1, 0, 0, 4), "error: string too long"},
		{"a good record, then a bad one", append(append([]byte{}, mkdir.Buf...), rec(0, 0, 0)...),
			"mkdir step=\"create /box\" 493 \"/r/box\"\nerror: unknown operation"},
	}
	for _, tt := range tests {
		if got := strings.TrimSuffix(renderPlan(tt.buf), "\n"); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// opCode is the code protocol.h gives the op called name.
func opCode(t *testing.T, name string) uint32 {
	for i, n := range opNames() {
		if n == name {
			return uint32(i + 1)
		}
	}
	t.Fatalf("no operation %q", name)
	return 0
}

// TestProtocolBoxPlan encodes the whole plan of a box's file system as
// rootfs.Plan makes it and decodes it: every op it emits has an encoding
// and comes out in order.
func TestProtocolBoxPlan(t *testing.T) {
	image := t.TempDir()
	for _, d := range []string{"usr/bin", "etc/alternatives"} {
		if err := os.MkdirAll(filepath.Join(image, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/bin", filepath.Join(image, "bin")); err != nil {
		t.Fatal(err)
	}
	ops, err := rootfs.Plan(&rootfs.Layout{Image: image, UID: 1000, GID: 1000, TmpSize: 1 << 20,
		Binds: []rootfs.Bind{{Host: image, Box: "/data", NoRec: true, Opened: &rootfs.OpenedSource{Tree: 9, Dir: true}},
			{FS: "tmpfs", Box: "/scratch", Writable: true}}})
	if err != nil {
		t.Fatal(err)
	}
	var p Plan
	p.FS(ops)
	lines := strings.Split(strings.TrimSuffix(renderPlan(p.Buf), "\n"), "\n")
	if len(lines) != len(ops) {
		t.Fatalf("%d ops decoded as %d records:\n%s", len(ops), len(lines), strings.Join(lines, "\n"))
	}
	names := map[string]string{"MakePrivate": "private", "Mount": "mount", "SetAttr": "setattr", "Mkdir": "mkdir",
		"Touch": "touch", "Symlink": "symlink", "WriteFile": "write", "RemountRO": "remount-ro", "Pivot": "pivot",
		"MoveMount": "move-mount"}
	for i, op := range ops {
		typ := strings.TrimPrefix(fmt.Sprintf("%T", op), "rootfs.")
		if got := strings.Fields(lines[i])[0]; got != names[typ] {
			t.Errorf("op %d (%+v) decoded as %q", i, op, lines[i])
		}
	}
}

// TestStepError checks that init's error message becomes a StepError
// callers can test with errors.As and errors.Is, its text naming the step,
// the op and the path.
func TestStepError(t *testing.T) {
	tests := []struct {
		m    Message
		want string
	}{
		{Message{Type: MsgError, Step: "create /proc/x", Op: "touch", Path: "/r/proc/x", Err: "No such file or directory", Errno: 2},
			"box setup failed: create /proc/x: touch /r/proc/x: No such file or directory (errno 2)"},
		{Message{Type: MsgError, Step: "cgroup", Op: "cgroup", Err: "Bad file descriptor", Errno: 9},
			"box setup failed: cgroup: cgroup: Bad file descriptor (errno 9)"},
		{Message{Type: MsgError, Step: "create namespaces", Err: "Operation not permitted", Errno: 1},
			"box setup failed: create namespaces: Operation not permitted (errno 1)"},
	}
	for _, tt := range tests {
		err := fmt.Errorf("box setup failed: %w", tt.m.StepError())
		var se *api.StepError
		if !errors.As(err, &se) || se.Step != tt.m.Step || se.Errno != tt.m.Errno {
			t.Errorf("%+v: not a StepError with its fields: %#v", tt.m, err)
		}
		if !errors.Is(err, syscall.Errno(tt.m.Errno)) {
			t.Errorf("%v: errors.Is(errno %d) is false", err, tt.m.Errno)
		}
		if err.Error() != tt.want {
			t.Errorf("got %q, want %q", err.Error(), tt.want)
		}
	}
}

// TestExecTime: init tells a program's start late, with the execve's
// time on CLOCK_MONOTONIC; the supervisor places it on Go's clock, never
// before the command was sent nor after now.
func TestExecTime(t *testing.T) {
	mono := func() int64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		return ts.Nano()
	}
	sent := time.Now().Add(-20 * time.Millisecond)

	// 5 ms ago: at least 5 ms before now, after the command was sent.
	at := ExecTime(&Message{ExecNs: mono() - int64(5*time.Millisecond)}, sent)
	if !at.Before(time.Now().Add(-5*time.Millisecond)) || at.Before(sent) {
		t.Errorf("execve 5 ms ago: placed %v before now, command sent %v before now", time.Since(at), time.Since(sent))
	}
	// Before the command was sent (no such execve): when it was sent.
	if at := ExecTime(&Message{ExecNs: mono() - int64(time.Second)}, sent); !at.Equal(sent) {
		t.Errorf("execve before the command: placed %v before now, want the command's %v", time.Since(at), time.Since(sent))
	}
	// In the future, or not told (a program that could not start): now.
	for _, ns := range []int64{mono() + int64(time.Second), 0} {
		before := time.Now()
		at := ExecTime(&Message{ExecNs: ns}, sent)
		if at.Before(before) || at.After(time.Now()) {
			t.Errorf("exec_ns %d: placed %v from now, want now", ns, time.Until(at))
		}
	}
}

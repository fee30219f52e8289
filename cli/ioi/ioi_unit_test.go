package ioi

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
)

// ioi/isolate's getopt_long command line, as judges write it.
func TestParse(t *testing.T) {
	o, err := Parse(strings.Fields("-b5 -t 1.5 -w3 -x 0.25 -m 1000 --cg --cg-mem=2000 -p10 -E A=1 -EB -s -v --share-net --run -- ./prog arg"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Mode() != ModeRun || o.BoxID() != 5 || o.timeout != 1500*time.Millisecond || o.wall != 3*time.Second || o.extra != 250*time.Millisecond ||
		o.memKB != 1000 || !o.cg || o.cgMemKB != 2000 || o.processes != 10 || strings.Join(o.env, ",") != "A=1,B" ||
		!o.Silent() || o.verbose != 1 || !o.shareNet || strings.Join(o.command, " ") != "./prog arg" {
		t.Errorf("parsed %+v", o)
	}
	o, err = Parse([]string{"--proc", "--init", "--box-id=3"}) // -p without a value: no limit; a prefix of --processes
	if err != nil || o.Mode() != ModeInit || o.BoxID() != 3 || o.processes != 0 {
		t.Errorf("--proc --init --box-id=3: %+v, %v", o, err)
	}
	o, err = Parse([]string{"--check-config"})
	if err != nil || o.Mode() != ModeCheckConfig {
		t.Errorf("--check-config: %+v, %v", o, err)
	}
	o, err = Parse([]string{"--syscalls=12", "--run", "--", "x"})
	if err != nil || o.syscallFlags != 12 {
		t.Errorf("--syscalls=12: %+v, %v", o, err)
	}
	for _, args := range []string{"", "--run", "--init --run", "--init x", "-b -1 --init", "-t NaN --run -- x", "-t -1 --run -- x",
		"--no-such --init", "-q --init", "--as-uid=5 --init", "-m 1K --run -- x", "--time --run",
		"--check-config --run -- x", "--check-config x", "--syscalls=x --init", "--syscalls=-1 --init"} {
		if o, err := Parse(strings.Fields(args)); err == nil {
			t.Errorf("%q: accepted as %+v", args, o)
		}
	}
}

func TestMetaText(t *testing.T) {
	for _, c := range []struct {
		name string
		rep  api.Report
		want string
	}{
		{"ok", api.Report{Status: api.StatusOK, CPUTime: 0.0123, WallTime: 0.5, MaxRSS: 2048 * 1024, CSWVoluntary: 3, CSWInvoluntary: 1, MemoryPeak: 4096},
			"time:0.012\ntime-wall:0.500\nmax-rss:2048\ncsw-voluntary:3\ncsw-forced:1\ncg-mem:4\nexitcode:0\n"},
		{"re", api.Report{Status: api.StatusRE, ExitCode: 3},
			"time:0.000\ntime-wall:0.000\nmax-rss:0\ncsw-voluntary:0\ncsw-forced:0\ncg-mem:0\nexitcode:3\nstatus:RE\nmessage:Exited with error status 3\n"},
		{"sg", api.Report{Status: api.StatusSG, Signal: 11, ExitCode: 139},
			"time:0.000\ntime-wall:0.000\nmax-rss:0\ncsw-voluntary:0\ncsw-forced:0\ncg-mem:0\nexitsig:11\nstatus:SG\nmessage:Caught fatal signal 11\n"},
		{"wall", api.Report{Status: api.StatusTO, Killed: true, Limit: api.LimitWall, Signal: 9},
			"time:0.000\ntime-wall:0.000\nmax-rss:0\ncsw-voluntary:0\ncsw-forced:0\ncg-mem:0\nkilled:1\nstatus:TO\nmessage:Time limit exceeded (wall clock)\n"},
		{"oom", api.Report{Status: api.StatusML, OOMKilled: true, Signal: 9},
			"time:0.000\ntime-wall:0.000\nmax-rss:0\ncsw-voluntary:0\ncsw-forced:0\ncg-mem:0\ncg-oom-killed:1\nexitsig:9\nstatus:SG\nmessage:Caught fatal signal 9\n"},
		{"stuck at the memory limit", api.Report{Status: api.StatusML, Killed: true, Limit: api.LimitMemory, Signal: 9},
			"time:0.000\ntime-wall:0.000\nmax-rss:0\ncsw-voluntary:0\ncsw-forced:0\ncg-mem:0\ncg-oom-killed:1\nexitsig:9\nstatus:SG\nmessage:Caught fatal signal 9\n"},
		{"xx", api.Report{Status: api.StatusXX, Message: "box setup failed:\nmount"}, "status:XX\nmessage:box setup failed: mount\n"},
	} {
		if got := MetaText(&c.rep); got != c.want {
			t.Errorf("%s: meta\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
}

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		rep  isolate.Report
		want api.Status
	}{
		{isolate.Report{Status: api.StatusOK}, api.StatusOK},
		{isolate.Report{Status: api.StatusML, OOMKilled: true, Signal: 9}, api.StatusSG},
		{isolate.Report{Status: api.StatusTO, Killed: true}, api.StatusTO},
		{isolate.Report{Status: api.StatusXX}, api.StatusXX},
		{isolate.Report{Status: api.StatusRE, ExitCode: 1}, api.StatusRE},
	} {
		if got := Outcome(&c.rep); got != c.want {
			t.Errorf("%+v: %s, want %s", c.rep, got, c.want)
		}
	}
}

func TestIOIEnv(t *testing.T) {
	t.Setenv("IOI_TEST_PASSED", "v")
	o := &Options{env: []string{"A=1", "IOI_TEST_PASSED", "A=2", "LIBC_FATAL_STDERR_=", "NOT_SET_ANYWHERE_X"}}
	if got := strings.Join(ioiEnv(o, os.Environ()), " "); got != "IOI_TEST_PASSED=v A=2" {
		t.Errorf("env %q", got)
	}
}

// TestMetaInterrupted: the meta file of a run a signal to isolate
// interrupted is ioi/isolate's, whether the program was running (killed)
// or not started yet (a FIFO's wait); ABRT, SEGV, BUS, FPE and ILL are
// its fatal-signal XX, with the same figures.
func TestMetaInterrupted(t *testing.T) {
	for _, c := range []struct {
		sig    syscall.Signal
		killed bool
		want   []string
		exit   int
	}{
		{syscall.SIGTERM, true, []string{"time:0.500", "killed:1", "exitsig:15", "status:SG", "message:Interrupted"}, 1},
		{syscall.SIGINT, false, []string{"killed:1", "exitsig:2", "status:SG", "message:Interrupted"}, 1},
		{syscall.SIGABRT, true, fatalMeta(6), 2},
		{syscall.SIGSEGV, true, fatalMeta(11), 2},
		{syscall.SIGBUS, true, fatalMeta(7), 2},
		{syscall.SIGFPE, true, fatalMeta(8), 2},
		{syscall.SIGILL, false, fatalMeta(4), 2},
	} {
		cause := fmt.Errorf("interrupted: %w", signalErr(c.sig))
		r := &isolate.Report{Status: isolate.StatusXX, Message: cause.Error(), Cause: cause, Killed: c.killed, CPUTime: 0.5}
		meta := MetaText(r)
		lines := strings.Split(strings.TrimSpace(meta), "\n")
		for _, w := range c.want {
			found := false
			for _, l := range lines {
				found = found || l == w
			}
			if !found {
				t.Errorf("%v: meta lacks %q:\n%s", c.sig, w, meta)
			}
		}
		if strings.Contains(meta, "exitcode:") || exitOf(r) != c.exit || isFatal(c.sig) && strings.Contains(meta, "exitsig:") {
			t.Errorf("%v: exit %d, meta:\n%s", c.sig, exitOf(r), meta)
		}
	}
}

// fatalMeta is what ioi/isolate's die() writes after a fatal signal to it:
// status and message, then box_exit's killed:1 and final_stats.
func fatalMeta(sig int) []string {
	return []string{"status:XX", fmt.Sprintf("message:Sandbox keeper received fatal signal %d", sig), "killed:1",
		"time:0.500", "time-wall:0.000", "max-rss:0", "csw-voluntary:0", "csw-forced:0", "cg-mem:0"}
}

// signalErr is a context cause as the CLI makes it for a signal.
type signalErr syscall.Signal

func (s signalErr) Error() string          { return "signal" }
func (s signalErr) Signal() syscall.Signal { return syscall.Signal(s) }

// exitOf is isolate's exit status for the outcome, as the CLI decides it.
func exitOf(r *isolate.Report) int {
	switch Outcome(r) {
	case api.StatusOK:
		return 0
	case api.StatusXX:
		return 2
	}
	return 1
}

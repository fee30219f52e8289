package bench

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/cgroup"
	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// machineInfo says where the figures were taken: they mean little without
// it.
type machineInfo struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model"`
	Kernel   string `json:"kernel"`
	Cgroup   string `json:"cgroup"`
	Go       string `json:"go"`
	Isolate  string `json:"isolate"`
	// Load is /proc/loadavg's 1-minute average when the bench began.
	Load string `json:"load"`
	// OtherCPUs is how many CPUs other work kept busy, on average, while
	// the bench ran: busy time of all CPUs (/proc/stat) less the bench's
	// own and its children's. Other work shifts every figure.
	OtherCPUs float64 `json:"other_cpus"`
	Date      string  `json:"date"`
	// Seed made the running order of every round and block (--seed
	// repeats it).
	Seed uint64 `json:"seed"`
}

// loadAvg is the 1-minute load average ("" if unknown).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}

// cpuMeter measures the CPU time other processes use.
type cpuMeter struct {
	start      time.Time
	busy, ours time.Duration
	// running are children of the bench that run while it measures
	// (its service): their CPU is its own, but in no getrusage of it
	// until they are reaped.
	running []int
}

// newCPUMeter starts measuring; running are the bench's children that
// run meanwhile.
func newCPUMeter(running ...int) cpuMeter {
	m := cpuMeter{start: time.Now(), busy: hostBusy(), running: running}
	m.ours = m.ownCPU()
	return m
}

// others is the average number of CPUs other work used since the meter
// started.
func (m cpuMeter) others() float64 {
	other := (hostBusy() - m.busy) - (m.ownCPU() - m.ours)
	if other < 0 {
		other = 0
	}
	return other.Seconds() / time.Since(m.start).Seconds()
}

// machineCPU is the CPU time every task of the machine used (kernel
// threads included), in nanoseconds from the root cgroup where it says
// (cpuacct.usage on v1, cpu.stat on v2), else hostBusy's ticks.
func machineCPU() time.Duration {
	if b, err := os.ReadFile("/sys/fs/cgroup/cpuacct/cpuacct.usage"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return time.Duration(n)
		}
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/cpu.stat"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					return time.Duration(n) * time.Microsecond
				}
			}
		}
	}
	return hostBusy()
}

// hostBusy is the time all CPUs spent not idle, from /proc/stat.
func hostBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var ticks int64
	for i, v := range f {
		if i == 0 || i == 4 || i == 5 || i > 8 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// ownCPU is the CPU time of this process, of the children it reaped and
// of those running.
func (m cpuMeter) ownCPU() time.Duration {
	total := reapedCPU()
	for _, pid := range m.running {
		total += procCPU(pid)
	}
	return total
}

// procCPU is the CPU time of process pid and of the children it reaped,
// from /proc/PID/stat (0 once it is gone).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// PID (COMM) STATE ...: utime, stime, cutime and cstime are the
	// 12th to 15th fields after the command's closing parenthesis.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, v := range f[11:15] {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// reapedCPU is the CPU time of this process and of the children it reaped.
func reapedCPU() time.Duration {
	var total time.Duration
	for _, who := range []int{unix.RUSAGE_SELF, unix.RUSAGE_CHILDREN} {
		var ru unix.Rusage
		if unix.Getrusage(who, &ru) == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return total
}

// busy tells whether other work took a noticeable share of the CPUs.
func (m machineInfo) busy() bool { return m.OtherCPUs > 0.2 }

func describeMachine(version string, seed uint64) machineInfo {
	var uts unix.Utsname
	unix.Uname(&uts)
	m := machineInfo{
		CPUs:     boxinit.NumCPU(),
		CPUModel: cpuModel(),
		Kernel:   unix.ByteSliceToString(uts.Release[:]),
		Cgroup:   string(cgroup.DetectMode()),
		Go:       runtime.Version(),
		Isolate:  version,
		Date:     time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Seed:     seed,
	}
	m.Load = loadAvg()
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

package main

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/cgroup"
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
	// Load and LoadEnd are /proc/loadavg's 1-minute average when the
	// bench began and ended: other work on the machine shifts every
	// figure.
	Load    string `json:"load"`
	LoadEnd string `json:"load_end"`
	Date    string `json:"date"`
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

// busy tells whether other work ran during the bench: a load average
// above half the CPUs, at its start or end (the bench itself adds about
// one).
func (m machineInfo) busy() bool {
	for _, l := range []string{m.Load, m.LoadEnd} {
		if v, err := strconv.ParseFloat(l, 64); err == nil && v > float64(m.CPUs)/2+1 {
			return true
		}
	}
	return false
}

func describeMachine() machineInfo {
	var uts unix.Utsname
	unix.Uname(&uts)
	m := machineInfo{
		CPUs:     runtime.NumCPU(),
		CPUModel: cpuModel(),
		Kernel:   unix.ByteSliceToString(uts.Release[:]),
		Cgroup:   string(cgroup.DetectMode()),
		Go:       runtime.Version(),
		Isolate:  version,
		Date:     time.Now().UTC().Format("2006-01-02 15:04 UTC"),
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

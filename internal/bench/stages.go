package bench

import (
	"sort"
	"strings"

	"github.com/isolate-sandbox/isolate/isolate"
)

// Parts of a run a stage belongs to.
const (
	PartCLI        = "cli"        // the isolate process around the runtime
	PartSupervisor = "supervisor" // isolate.Run's own timers, in order
	PartInit       = "init"       // init's timers, inside the supervisor's "start"
	PartTotal      = "total"      // the report's setup/teardown and the outside view
)

// supervisorStages are the supervisor's timers in the order a run passes
// them; stages not listed here (renamed or new ones) follow them.
var supervisorStages = []string{"validate", "lock", "cgroup", "image-mount", "spawn-prep", "spawn", "early-init", "plan", "cgroup-wait", "namespaces+fs", "copy-in", "before-start", "start", "program", "wait-init", "cgroup-remove"}

// initStages are init's timers in order; any other "init-" stage follows
// them.
var initStages = []string{"init-namespaces", "init-maps", "init-plan", "init-setup", "init-exec"}

// Names of the stages the bench derives rather than reads.
const (
	StageCLI           = "cli"
	StageInitDerived   = "init-start (derived)"
	StageSetup         = "setup_time"
	StageTeardown      = "teardown_time"
	StageSetupTeardown = "setup+teardown"
	stageProgramWall   = "wall_time (program)"
	StageOutside       = "wall outside"
)

// StageResult is one row of the stage breakdown.
type StageResult struct {
	Name string `json:"name"`
	Part string `json:"part"`
	// Ms is the stage's duration over the runs, in milliseconds.
	Ms dist `json:"ms"`
	// Derived marks figures computed from others rather than timed.
	Derived bool `json:"derived,omitempty"`
}

// stageBreakdown turns the isolate runs' reports and outside wall times
// into the breakdown, in the order a run passes the stages.
func stageBreakdown(reports []*isolate.Report, outside []float64) []StageResult {
	samples := map[string][]float64{}
	seen := map[string]bool{}
	add := func(name string, v float64) { samples[name] = append(samples[name], v) }
	for i, rep := range reports {
		sb := rep.Sandbox
		st := sb.Stages
		for k, v := range st {
			add(k, v*1000)
			seen[k] = true
		}
		program := rep.WallTime
		if p, ok := st["program"]; ok {
			program = p
		}
		// What the supervisor's timers do not see: exec of the isolate
		// binary, the Go runtime's start, flag parsing, printing the
		// report and exiting.
		add(StageCLI, outside[i]-(sb.SetupTime+program+sb.TeardownTime)*1000)
		if start, ok := st["start"]; ok && st["early-init"] == 0 {
			// Init's timers start when its own code does: what of the
			// supervisor's stages from init's spawn to the program's start
			// they do not cover is init's way in (from execve to its first
			// timer) and the messages' trips. (An early init started
			// before the supervisor's timers.)
			rest := st["plan"] + st["cgroup-wait"] + st["before-start"] + start + st["namespaces+fs"]
			for k, v := range st {
				if strings.HasPrefix(k, "init-") {
					rest -= v
				}
			}
			add(StageInitDerived, rest*1000)
		}
		add(StageSetup, sb.SetupTime*1000)
		add(StageTeardown, sb.TeardownTime*1000)
		add(StageSetupTeardown, (sb.SetupTime+sb.TeardownTime)*1000)
		add(stageProgramWall, rep.WallTime*1000)
		add(StageOutside, outside[i])
	}
	var rows []StageResult
	row := func(name, part string, derived bool) {
		if xs, ok := samples[name]; ok {
			rows = append(rows, StageResult{Name: name, Part: part, Ms: summarize(xs), Derived: derived})
		}
	}
	row(StageCLI, PartCLI, true)
	known := map[string]bool{}
	for _, k := range append(append([]string{}, supervisorStages...), initStages...) {
		known[k] = true
	}
	var extraSup, extraInit []string
	for k := range seen {
		if known[k] {
			continue
		}
		if strings.HasPrefix(k, "init-") {
			extraInit = append(extraInit, k)
		} else {
			extraSup = append(extraSup, k)
		}
	}
	sort.Strings(extraSup)
	sort.Strings(extraInit)
	for _, k := range append(append([]string{}, supervisorStages...), extraSup...) {
		row(k, PartSupervisor, false)
		if k == "start" {
			for _, ik := range append(append([]string{}, initStages...), extraInit...) {
				row(ik, PartInit, false)
			}
			row(StageInitDerived, PartInit, true)
		}
	}
	for _, k := range []string{StageSetup, StageTeardown, StageSetupTeardown, stageProgramWall, StageOutside} {
		row(k, PartTotal, k == StageSetupTeardown)
	}
	return rows
}

// stageMedian finds a row's median (0 when absent).
func stageMedian(rows []StageResult, name string) float64 {
	for _, r := range rows {
		if r.Name == name {
			return r.Ms.Median
		}
	}
	return 0
}

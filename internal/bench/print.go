package bench

import (
	"fmt"
	"io"
	"strings"
)

// stageMeaning says what each stage of the breakdown covers.
var stageMeaning = map[string]string{
	StageCLI:           "exec of the isolate binary, Go runtime start, flags, printing the report, exit (wall outside − setup − program − teardown)",
	"validate":         "check the spec; compile the seccomp policy to BPF",
	"lock":             "take the box id (flock a file in /run/isolate/locks)",
	"cgroup":           "in a goroutine, beside the stages up to cgroup-wait: sweep stale cgroups of the id; create the box cgroups, write the limits, open the files the program joins them by",
	"image-mount":      "(squashfs images only) mount the image",
	"spawn-prep":       "control socket, status pipe, standard streams",
	"spawn":            "vfork and execve of init (the isolate binary, whose C init runs before the Go runtime)",
	"early-init":       "instead of spawn-prep and spawn: take the init the isolate command forked before the Go runtime started, and write its ID maps",
	"plan":             "the plan of the box for init (file system, /etc, program, limits, seccomp filter), sent at once but for its cgroup part",
	"cgroup-wait":      "waiting for the cgroup goroutine (meanwhile PID 1 builds the file system); sending the cgroup files, the plan's last part",
	"namespaces+fs":    "(--copy-in only) init's setup up to its 'ready' message",
	"copy-in":          "(--copy-in only) copying files into the box",
	"start":            "from the plan's sending to init's 'started' message: init's stages below",
	"init-namespaces":  "init: from its first instruction: clone PID 1 (sharing init's memory) into new user, PID, mount, net, IPC and UTS namespaces",
	"init-maps":        "init, still root of the host's user namespace, writes PID 1's uid_map and gid_map (an early init waits here for the supervisor to send them)",
	"init-plan":        "PID 1: wait for the plan's first part",
	"init-setup":       "PID 1 (C, before any Go runtime): carry out the plan as it arrives: loopback, host name, tmpfs root, binds, /etc, /proc, /dev, /box, /tmp, pivot_root; then the cgroup files",
	"init-exec":        "PID 1: start the program (clone3, sharing PID 1's memory until its execve), which joins its cgroups, sets rlimits, drops privileges, loads seccomp and execs; ends when the exec succeeded",
	StageInitDerived:   "plan + cgroup-wait + start − init's own stages: init's way in (execve of the isolate binary up to init's first timer) and the messages' trips",
	"program":          "from 'started' to init's 'exited' message: the program's run and reaping",
	"wait-init":        "init exits; the kernel drops its namespaces and mounts; captured output collected",
	"cgroup-remove":    "remove the box cgroups",
	StageSetup:         "the report's setup_time: from the start of the run to the program's start",
	StageTeardown:      "the report's teardown_time",
	StageSetupTeardown: "their sum, per run",
	stageProgramWall:   "the report's wall_time",
	StageOutside:       "the isolate command from fork to reap, seen by the bench",
}

// printText writes the results for a person at a terminal.
func PrintText(w io.Writer, res *Result) {
	m := res.Machine
	fmt.Fprintf(w, "isolate bench · %d CPUs · %s · Linux %s · cgroup %s · load %s · %s · --seed %d\n", m.CPUs, m.CPUModel, m.Kernel, m.Cgroup, m.Load, m.Date, m.Seed)
	if m.busy() {
		fmt.Fprintf(w, "warning: other work kept %.2f of %d CPUs busy meanwhile: it inflates these figures\n", m.OtherCPUs, m.CPUs)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "/bin/true, %d interleaved rounds, each in a random order (ms from fork to reap; cpu: user+sys of all it reaped)\n", res.Rounds)
	fmt.Fprintf(w, "  %-40s %8s %8s %8s %8s  %s\n", "", "median", "p90", "min", "cpu", "ratio to bwrap")
	for _, v := range res.Latency {
		if v.Skipped != "" {
			fmt.Fprintf(w, "  %-40s skipped: %s\n", v.Name, v.Skipped)
			continue
		}
		fmt.Fprintf(w, "  %-40s %8.2f %8.2f %8.2f %8.2f  %s\n", v.Name, v.WallMs.Median, v.WallMs.P90, v.WallMs.Min, v.CPUMs.Median, ratioText(v.RatioToBwrap))
	}
	fmt.Fprintf(w, "\nisolate run stages (ms over %d runs; init's stages are inside \"start\")\n", stageCount(res))
	fmt.Fprintf(w, "  %-28s %8s %8s\n", "", "median", "p90")
	for _, s := range res.Stages {
		name := s.Name
		if s.Part == PartInit {
			name = "  " + name
		}
		if s.Part == PartTotal && s.Name == StageSetup {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "  %-28s %8.3f %8.3f\n", name, s.Ms.Median, s.Ms.P90)
	}
	if t := res.Throughput; t != nil {
		fmt.Fprintf(w, "\nthroughput of isolate run -- /bin/true (median of %d blocks of %d runs)\n", t.Blocks, t.RunsPerBlock)
		fmt.Fprintf(w, "  1 at a time %.1f runs/s · 2 in parallel %.1f runs/s · ratio %.2f\n", t.One, t.Two, t.Ratio)
	}
	if p := res.Precision; p != nil {
		fmt.Fprintf(w, "\nprecision (%d runs each)\n", p.Runs)
		fmt.Fprintf(w, "  %-34s %8s %8s %8s %8s\n", "", "min", "median", "p90", "max")
		fmt.Fprintln(w, "  CPU-limit overshoot (cpu_time − limit, ms)")
		for _, r := range p.CPULimit {
			fmt.Fprintf(w, "    %-32s %8.2f %8.2f %8.2f %8.2f\n", r.Label, r.Ms.Min, r.Ms.Median, r.Ms.P90, r.Ms.Max)
		}
		fmt.Fprintln(w, "  CPU accounting error (cpu_time vs the program's getrusage, %)")
		for _, r := range p.CPUAccounting {
			fmt.Fprintf(w, "    %-32s %8.3f %8.3f %8.3f %8.3f\n", r.Label, r.Pct.Min, r.Pct.Median, r.Pct.P90, r.Pct.Max)
		}
		fmt.Fprintln(w, "  memory peak error (memory_peak vs bytes touched, %)")
		for _, r := range p.Memory {
			fmt.Fprintf(w, "    %-32s %8.3f %8.3f %8.3f %8.3f\n", r.Label, r.Pct.Min, r.Pct.Median, r.Pct.P90, r.Pct.Max)
		}
		fmt.Fprintln(w, "  wall-limit overshoot (wall_time − limit, ms)")
		for _, r := range p.WallLimit {
			fmt.Fprintf(w, "    %-32s %8.2f %8.2f %8.2f %8.2f\n", r.Label, r.Ms.Min, r.Ms.Median, r.Ms.P90, r.Ms.Max)
		}
	}
	fmt.Fprintln(w, "\ntargets")
	for _, t := range res.Targets {
		mark := "met   "
		if !t.Met {
			mark = "MISSED"
		}
		fmt.Fprintf(w, "  %s %-42s %8.2f  (%s)\n", mark, t.Name, t.Value, t.Target)
	}
}

// stageCount is how many isolate runs the breakdown covers.
func stageCount(res *Result) int {
	for _, s := range res.Stages {
		if s.Name == StageOutside {
			return s.Ms.N
		}
	}
	return 0
}

func ratioText(r float64) string {
	if r == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", r)
}

// printMarkdown writes the results as the generated part of
// docs/PERFORMANCE.md.
func PrintMarkdown(w io.Writer, res *Result) {
	m := res.Machine
	cmd := "isolate bench"
	if res.Precision != nil {
		cmd += " --precision"
	}
	fmt.Fprintf(w, "Measured %s with `%s --seed %d` (isolate %s, %s).\n\n", m.Date, cmd, m.Seed, m.Isolate, m.Go)
	fmt.Fprintln(w, "| machine | |")
	fmt.Fprintln(w, "|---|---|")
	fmt.Fprintf(w, "| CPUs (nproc) | %d |\n| CPU model | %s |\n| kernel | %s |\n| cgroup mode | %s |\n| load average at start | %s |\n| CPUs other work used meanwhile | %.2f |\n\n", m.CPUs, m.CPUModel, m.Kernel, m.Cgroup, m.Load, m.OtherCPUs)
	if m.busy() {
		fmt.Fprintf(w, "**The machine was busy during this measurement** (other work kept %.2f of %d CPUs busy): it inflates the figures.\n\n", m.OtherCPUs, m.CPUs)
	}

	fmt.Fprintf(w, "### Latency of `/bin/true` (%d interleaved rounds, ms from fork to reap)\n\n", res.Rounds)
	fmt.Fprintln(w, "CPU is the median user + system time of the command and everything it reaped (wait4's rusage).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| variant | command | median | p90 | min | CPU | ratio to bwrap |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
	for _, v := range res.Latency {
		if v.Skipped != "" {
			fmt.Fprintf(w, "| %s | skipped: %s | | | | | |\n", v.Name, v.Skipped)
			continue
		}
		fmt.Fprintf(w, "| %s | `%s` | %.2f | %.2f | %.2f | %.2f | %s |\n", v.Name, strings.Join(v.Command, " "), v.WallMs.Median, v.WallMs.P90, v.WallMs.Min, v.CPUMs.Median, ratioText(v.RatioToBwrap))
	}

	fmt.Fprintf(w, "\n### Where an `isolate run -- /bin/true` spends its time (ms over %d runs)\n\n", stageCount(res))
	fmt.Fprintln(w, "Supervisor stages in the order a run passes them; init's stages (indented) happen inside `start`.")
	fmt.Fprintln(w, "Medians of the parts need not add up to the median of the whole.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| stage | median | p90 | what it covers |")
	fmt.Fprintln(w, "|---|---:|---:|---|")
	for _, s := range res.Stages {
		name := "`" + s.Name + "`"
		if s.Part == PartInit {
			name = "&nbsp;&nbsp;&nbsp;&nbsp;" + name
		}
		if s.Part == PartTotal {
			name = "**" + s.Name + "**"
		}
		fmt.Fprintf(w, "| %s | %.3f | %.3f | %s |\n", name, s.Ms.Median, s.Ms.P90, stageMeaning[s.Name])
	}
	if t := res.Throughput; t != nil {
		fmt.Fprintf(w, "\n### Throughput of `isolate run -- /bin/true` (median of %d turns of blocks of %d runs, a random order each turn)\n\n", t.Blocks, t.RunsPerBlock)
		fmt.Fprintln(w, "| runs at a time | runs/s | blocks (runs/s) |")
		fmt.Fprintln(w, "|---:|---:|---|")
		fmt.Fprintf(w, "| 1 | %.1f | %s |\n| 2 | %.1f | %s |\n\nRatio 2 parallel / 1: **%.2f**.\n", t.One, floats(t.OneBlocks), t.Two, floats(t.TwoBlocks), t.Ratio)
	}
	if p := res.Precision; p != nil {
		fmt.Fprintf(w, "\n### Precision (%d runs each)\n\n", p.Runs)
		fmt.Fprintln(w, "| benchmark | case | min | median | p90 | max | target |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---|")
		for _, r := range p.CPULimit {
			fmt.Fprintf(w, "| CPU-limit overshoot: `cpu_time` − limit (ms) | %s | %.2f | %.2f | %.2f | %.2f | ≤ %.0f ms |\n", r.Label, r.Ms.Min, r.Ms.Median, r.Ms.P90, r.Ms.Max, r.Target)
		}
		for _, r := range p.CPUAccounting {
			fmt.Fprintf(w, "| CPU accounting: `cpu_time` vs the program's getrusage (%%) | %s | %.3f | %.3f | %.3f | %.3f | ±%.0f %% |\n", r.Label, r.Pct.Min, r.Pct.Median, r.Pct.P90, r.Pct.Max, r.Target)
		}
		for _, r := range p.Memory {
			fmt.Fprintf(w, "| memory: `memory_peak` vs bytes touched (%%) | %s | %.3f | %.3f | %.3f | %.3f | ±%.0f %% |\n", r.Label, r.Pct.Min, r.Pct.Median, r.Pct.P90, r.Pct.Max, r.Target)
		}
		for _, r := range p.WallLimit {
			fmt.Fprintf(w, "| wall-limit overshoot: `wall_time` − limit (ms) | %s | %.2f | %.2f | %.2f | %.2f | |\n", r.Label, r.Ms.Min, r.Ms.Median, r.Ms.P90, r.Ms.Max)
		}
	}
	fmt.Fprint(w, "\n### Targets\n\n")
	fmt.Fprintln(w, "| target | measured | wanted | |")
	fmt.Fprintln(w, "|---|---:|---|---|")
	for _, t := range res.Targets {
		mark := "met"
		if !t.Met {
			mark = "**missed**"
		}
		fmt.Fprintf(w, "| %s | %.2f | %s | %s |\n", t.Name, t.Value, t.Target, mark)
	}
}

func floats(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%.1f", x))
	}
	return strings.Join(s, ", ")
}

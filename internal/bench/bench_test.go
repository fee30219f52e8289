package bench

// Go benchmarks of the same measurements `isolate bench` makes, on the
// binary under test (see harness_test.go): `go test -run '^$' -bench .`.
// Latencies report median-ms and p90-ms besides ns/op; the precision
// benchmarks report their overshoot or error as metrics. Never assertions.

import (
	"os"
	"testing"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
)

// isolateBin is the isolate binary the benchmarks start, as a user would:
// ISOLATE_BIN (scripts/test.sh sets it; make build gives bin/isolate).
var isolateBin = os.Getenv("ISOLATE_BIN")

func TestMain(m *testing.M) {
	boxinit.MaybeInit()
	os.Exit(m.Run())
}

// needBin skips a benchmark that has no isolate binary to run, or no
// root to run it.
func needBin(b *testing.B) {
	if isolateBin == "" {
		b.Skip("needs ISOLATE_BIN, the isolate binary to measure")
	}
	if os.Geteuid() != 0 {
		b.Skip("needs root: isolate runs only as root")
	}
}

// benchOne times b.N runs of one latency variant.
func benchOne(b *testing.B, name string) {
	needBin(b)
	r := &benchRunner{bin: isolateBin}
	vs, skipped := r.variants()
	if why, ok := skipped[name]; ok {
		b.Skip(why)
	}
	var v variant
	for _, x := range vs {
		if x.name == name {
			v = x
		}
	}
	out, err := newSink()
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	var wall, cpu, outside []float64
	var samples latencySamples
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if v.isolate {
			took, rep, err := r.isolateTrue(out)
			if err != nil {
				b.Fatal(err)
			}
			wall = append(wall, ms(took.wall))
			cpu = append(cpu, ms(took.cpu))
			samples.reports = append(samples.reports, rep)
			outside = append(outside, ms(took.wall))
			continue
		}
		took, err := timed(v.argv, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		wall = append(wall, ms(took.wall))
		cpu = append(cpu, ms(took.cpu))
	}
	b.StopTimer()
	s := summarize(wall)
	b.ReportMetric(s.Median, "median-ms")
	b.ReportMetric(s.P90, "p90-ms")
	b.ReportMetric(median(cpu), "cpu-ms")
	if v.isolate {
		stages := stageBreakdown(samples.reports, outside)
		b.ReportMetric(stageMedian(stages, StageSetupTeardown), "setup+teardown-ms")
		b.ReportMetric(stageMedian(stages, StageCLI), "cli-ms")
	}
}

func BenchmarkBareTrue(b *testing.B)       { benchOne(b, VarBare) }
func BenchmarkIsolateVersion(b *testing.B) { benchOne(b, VarCLI) }
func BenchmarkIsolateRunTrue(b *testing.B) { benchOne(b, VarIsolate) }
func BenchmarkBwrapTrue(b *testing.B)      { benchOne(b, VarBwrap) }
func BenchmarkUnshareTrue(b *testing.B)    { benchOne(b, VarUnshare) }

// BenchmarkThroughput runs `isolate run -- /bin/true` one and two at a
// time; ns/op is the inverse of the throughput.
func BenchmarkThroughput(b *testing.B) {
	needBin(b)
	r := &benchRunner{bin: isolateBin}
	for _, c := range []struct {
		name    string
		workers int
	}{{"1", 1}, {"2", 2}} {
		b.Run(c.name, func(b *testing.B) {
			rate, err := r.parallelBlock(b.N, c.workers)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(rate, "runs/s")
		})
	}
}

// precisionBench gives a precision benchmark the probe and a sink.
func precisionBench(b *testing.B) (*benchRunner, *probeBox, *sink) {
	needBin(b)
	p, err := buildProbe()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.remove)
	out, err := newSink()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { out.Close() })
	return &benchRunner{bin: isolateBin}, p, out
}

func BenchmarkCPULimitOvershoot(b *testing.B) {
	r, p, out := precisionBench(b)
	for _, c := range []struct {
		name    string
		limit   float64
		threads int
	}{{"0.1s", 0.1, 1}, {"0.3s", 0.3, 1}, {"1s", 1, 1}, {"0.3s-2threads", 0.3, 2}} {
		b.Run(c.name, func(b *testing.B) {
			row, err := r.cpuOvershoot(p, out, b.N, c.limit, c.threads)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(row.Ms.Median, "overshoot-median-ms")
			b.ReportMetric(row.Ms.Max, "overshoot-max-ms")
		})
	}
}

func BenchmarkCPUAccountingError(b *testing.B) {
	r, p, out := precisionBench(b)
	for _, threads := range []int{1, 2} {
		b.Run(map[int]string{1: "1thread", 2: "2threads"}[threads], func(b *testing.B) {
			row, err := r.cpuAccounting(p, out, b.N, threads, 0.5)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(row.Pct.Median, "error-median-%")
			b.ReportMetric(row.MaxAbs, "error-maxabs-%")
		})
	}
}

func BenchmarkMemoryPeakError(b *testing.B) {
	r, p, out := precisionBench(b)
	for _, mib := range []int{64, 200} {
		b.Run(map[int]string{64: "64MiB", 200: "200MiB"}[mib], func(b *testing.B) {
			row, err := r.memoryError(p, out, b.N, mib)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(row.Pct.Median, "error-median-%")
			b.ReportMetric(row.MaxAbs, "error-maxabs-%")
		})
	}
}

func BenchmarkWallLimitOvershoot(b *testing.B) {
	r, p, out := precisionBench(b)
	for _, c := range []struct {
		name  string
		limit float64
	}{{"0.1s", 0.1}, {"0.5s", 0.5}} {
		b.Run(c.name, func(b *testing.B) {
			row, err := r.wallOvershoot(p, out, b.N, c.limit)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(row.Ms.Median, "overshoot-median-ms")
			b.ReportMetric(row.Ms.Max, "overshoot-max-ms")
		})
	}
}

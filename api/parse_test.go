package api

import (
	"testing"
	"time"
)

// The parsers accept exactly finite, non-negative numbers in range. The
// bad inputs below were accepted by the CLI's parsers before package api
// (NaN became a huge or negative limit; "0.5x" and "inf" CPU bandwidths,
// an empty --time became "no limit").
func TestParseSize(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"1", 1}, {"1024", 1024}, {"1K", 1 << 10}, {"1k", 1 << 10}, {"512M", 512 << 20}, {"2G", 2 << 30},
		{"1.5M", 3 << 19}, {" 64M ", 64 << 20}, {"0", Unlimited}, {"0M", Unlimited}, {"unlimited", Unlimited},
		{"4194304G", 1 << 52}, {"4611686018427387904", 1 << 62}, {"4294967296G", 1 << 62},
	}
	for _, c := range good {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "NaN", "nan", "NaNM", "Inf", "+Inf", "-Inf", "infinity", "-1", "+1", "1e3", "1E3",
		"0x10", "1_000", "0.5x", "1KB", "1T", "M", ".", "1..2", "1.2.3", "99999999999G", "1e400", "１",
		"4611686018427387905", "4294967297G", "18446744073709551615", "18446744073709551616"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseDuration(t *testing.T) {
	good := []struct {
		in   string
		want time.Duration
	}{
		{"1", time.Second}, {"1.5", 1500 * time.Millisecond}, {".5", 500 * time.Millisecond}, {"1500ms", 1500 * time.Millisecond},
		{"2s", 2 * time.Second}, {"1m", time.Minute}, {"1m30s", 90 * time.Second}, {"0", 0}, {"unlimited", 0}, {"0.0005", 500 * time.Microsecond},
	}
	for _, c := range good {
		got, err := ParseDuration(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", " ", "NaN", "nan", "NaNs", "Inf", "inf", "-1", "-1s", "+1s", "1e3", "0x10", "fast", "abc",
		"1000000000000", "100000000h", "1.5x", "s", "1 s"} {
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
		}
	}
}

func TestMillis(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want int64
	}{{0, 0}, {time.Nanosecond, 1}, {time.Millisecond, 1}, {1500 * time.Microsecond, 2}, {300 * time.Millisecond, 300}} {
		if got := Millis(c.in); got != c.want {
			t.Errorf("Millis(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestParseCount(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{{"1", 1}, {"64", 64}, {"0", Unlimited}, {"unlimited", Unlimited}, {"2147483647", 2147483647}}
	for _, c := range good {
		got, err := ParseCount(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseCount(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "NaN", "Inf", "-1", "+1", "1.5", "1e3", "0x10", "2147483648", "99999999999999999999", "1K"} {
		if got, err := ParseCount(in); err == nil {
			t.Errorf("ParseCount(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseCPUs(t *testing.T) {
	good := []struct {
		in   string
		want float64
	}{{"1", 1}, {"0.5", 0.5}, {"1.5", 1.5}, {"0", Unlimited}, {"unlimited", Unlimited}}
	for _, c := range good {
		got, err := ParseCPUs(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseCPUs(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "NaN", "nan", "inf", "Inf", "-1", "-0.5", "0.5x", "1e3", "0x1p-2", "100000", "1 5"} {
		if got, err := ParseCPUs(in); err == nil {
			t.Errorf("ParseCPUs(%q) = %v, want an error", in, got)
		}
	}
}

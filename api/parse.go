package api

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// Bounds of the values the parsers accept: far beyond any real limit, and
// far from overflowing what the kernel or time.Duration takes.
const (
	MaxSize     = 1 << 62
	MaxCount    = 1<<31 - 1
	MaxCPUs     = 1 << 16
	MaxDuration = time.Duration(maxMs) * time.Millisecond
)

// The parsers read the values of command-line options (docs/REFERENCE.md: SIZE,
// DUR, counts). Each accepts exactly a finite, non-negative number in
// range: no NaN, no infinities, no exponents, signs or trailing junk, no
// empty string. "0" and "unlimited" turn a limit off.

var (
	errSize     = errors.New("not a size (bytes, or a number with K, M or G; 0 or unlimited for none)")
	errDuration = errors.New("not a duration (seconds like 1.5, or 1500ms, 2s, 1m; 0 or unlimited for none)")
	errCount    = errors.New("not a non-negative integer (0 or unlimited for none)")
	errCPUs     = errors.New("not a number of CPUs (like 0.5 or 2; 0 or unlimited for none)")
)

// decimal reads digits with at most one '.', as float64; ok is false for
// anything else, including "", ".", "NaN", "Inf", "1e3", "+1", "0x10".
func decimal(s string) (float64, bool) {
	digits, dots := 0, 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return 0, false
		}
	}
	if digits == 0 || dots > 1 {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil && !math.IsInf(v, 0)
}

// ParseSize reads SIZE: bytes, or a number with K, M or G (powers of
// 1024), as a Spec limit in bytes: "0" and "unlimited" give Unlimited.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "unlimited" {
		return Unlimited, nil
	}
	mult := 1.0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	// A whole number is read exactly: as a float, 2^62+1 would round
	// to 2^62 and pass the bound.
	if n, err := strconv.ParseUint(t, 10, 64); err == nil {
		if n > uint64(MaxSize/mult) {
			return 0, errSize
		}
		if n == 0 {
			return Unlimited, nil
		}
		return int64(n) * int64(mult), nil
	}
	v, ok := decimal(t)
	if !ok || v*mult > MaxSize {
		return 0, errSize
	}
	if v == 0 {
		return Unlimited, nil
	}
	return int64(v * mult), nil
}

// ParseDuration reads DUR: seconds ("1.5"), or a number with a unit
// ("1500ms", "2s", "1m", as Go writes durations). "0" and "unlimited" give
// 0, which in a Spec means the default.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "unlimited" {
		return 0, nil
	}
	if v, ok := decimal(t); ok {
		if v > MaxDuration.Seconds() {
			return 0, errDuration
		}
		return time.Duration(v * float64(time.Second)), nil
	}
	// Go's own syntax, which has no NaN or infinity; only refuse a sign.
	if t == "" || (t[0] != '.' && (t[0] < '0' || t[0] > '9')) {
		return 0, errDuration
	}
	d, err := time.ParseDuration(t)
	if err != nil || d < 0 || d > MaxDuration {
		return 0, errDuration
	}
	return d, nil
}

// Millis is d in whole milliseconds for a Spec, rounded up so that a
// limit never becomes 0 (the default) or shorter than asked.
func Millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// ParseCount reads a non-negative integer as a Spec limit: "0" and
// "unlimited" give Unlimited.
func ParseCount(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "unlimited" {
		return Unlimited, nil
	}
	for _, c := range t {
		if c < '0' || c > '9' {
			return 0, errCount
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v > MaxCount {
		return 0, errCount
	}
	if v == 0 {
		return Unlimited, nil
	}
	return v, nil
}

// ParseCPUs reads a CPU bandwidth ("0.5", "2") as a Spec value: "0" and
// "unlimited" give Unlimited.
func ParseCPUs(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if t == "unlimited" {
		return Unlimited, nil
	}
	v, ok := decimal(t)
	if !ok || v > MaxCPUs {
		return 0, errCPUs
	}
	if v == 0 {
		return Unlimited, nil
	}
	return v, nil
}

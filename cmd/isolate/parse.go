package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/isolate-sandbox/isolate/isolate"
)

// parseSize reads SIZE: bytes, or with K, M, G (powers of 1024); "0" and
// "unlimited" turn a limit off (0).
func parseSize(flag, s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "unlimited" {
		return 0, nil
	}
	mult := int64(1)
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
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || t == "" || strings.ContainsAny(t, "eE+-xXpP_") || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("--%s %q: not a size (bytes, or a number with K, M or G; 0 or unlimited for none)", flag, s)
	}
	return int64(v * float64(mult)), nil
}

// parseDuration reads DUR: seconds ("1.5"), or Go-style with a unit
// ("1500ms", "2s", "1m"); "0" and "unlimited" turn a limit off.
func parseDuration(flag, s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "unlimited" {
		return 0, nil
	}
	bad := fmt.Errorf("--%s %q: not a duration (seconds like 1.5, or 1500ms, 2s, 1m; 0 or unlimited for none)", flag, s)
	if v, err := strconv.ParseFloat(t, 64); err == nil && !strings.ContainsAny(t, "eExXpP_+-") {
		if v < 0 || v > 1e9 {
			return 0, bad
		}
		return time.Duration(v * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(t)
	if err != nil || d < 0 {
		return 0, bad
	}
	return d, nil
}

// parseCount reads a non-negative integer; "unlimited" is 0.
func parseCount(flag, s string) (int64, error) {
	if s == "unlimited" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("--%s %q: not a non-negative integer", flag, s)
	}
	return v, nil
}

// parseBind reads HOST:BOX[:ro|rw].
func parseBind(s string) (isolate.Bind, error) {
	parts := strings.Split(s, ":")
	b := isolate.Bind{}
	switch {
	case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
		b.Writable = parts[2] == "rw"
	case len(parts) == 2:
	default:
		return b, fmt.Errorf("--bind %q: expected HOST:BOX[:ro|rw]", s)
	}
	b.Host, b.Box = parts[0], parts[1]
	if b.Host == "" || b.Box == "" {
		return b, fmt.Errorf("--bind %q: expected HOST:BOX[:ro|rw]", s)
	}
	return b, nil
}

// parseCopy reads FROM:TO.
func parseCopy(flag, s string) (isolate.Copy, error) {
	from, to, ok := strings.Cut(s, ":")
	if !ok || from == "" || to == "" {
		return isolate.Copy{}, fmt.Errorf("--%s %q: expected FROM:TO", flag, s)
	}
	return isolate.Copy{From: from, To: to}, nil
}

// buildEnv is the program's environment: the base, then each -E NAME=VALUE,
// or NAME for the caller's own value.
func buildEnv(base []string, vars []string) ([]string, error) {
	env := append([]string(nil), base...)
	set := func(kv string) {
		name, _, _ := strings.Cut(kv, "=")
		for i, e := range env {
			if strings.HasPrefix(e, name+"=") {
				env[i] = kv
				return
			}
		}
		env = append(env, kv)
	}
	for _, v := range vars {
		name, _, hasValue := strings.Cut(v, "=")
		if name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("--env %q: expected NAME[=VALUE]", v)
		}
		if hasValue {
			set(v)
		} else if val, ok := os.LookupEnv(name); ok {
			set(name + "=" + val)
		}
	}
	return env, nil
}

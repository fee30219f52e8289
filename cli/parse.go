package cmdline

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/isolate-sandbox/isolate/api"
)

// ParseBoxID reads a box id: decimal digits only (urfave/cli's integers
// also take 0x10, 010 and 0b10, which would name another box than the
// one the user meant).
func ParseBoxID(s string) (int, error) {
	if s == "" || len(s) > 10 || strings.Trim(s, "0123456789") != "" {
		return 0, errors.New("must be a decimal number, 0 or more")
	}
	return strconv.Atoi(s)
}

// parseBind reads HOST:BOX[:ro|rw].
func parseBind(s string) (api.Bind, error) {
	parts := strings.Split(s, ":")
	b := api.Bind{}
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
func parseCopy(flag, s string) (api.Copy, error) {
	from, to, ok := strings.Cut(s, ":")
	if !ok || from == "" || to == "" {
		return api.Copy{}, fmt.Errorf("--%s %q: expected FROM:TO", flag, s)
	}
	return api.Copy{From: from, To: to}, nil
}

// envFromFlags is the request's environment from -E: NAME=VALUE as
// given, NAME with the caller's own value (lookup; left out when the
// caller has none).
func envFromFlags(vars []string, lookup func(string) (string, bool)) ([]string, error) {
	var env []string
	for _, v := range vars {
		name, _, hasValue := strings.Cut(v, "=")
		if name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("--env %q: expected NAME[=VALUE]", v)
		}
		if hasValue {
			env = append(env, v)
		} else if val, ok := lookup(name); ok {
			env = append(env, name+"="+val)
		}
	}
	return env, nil
}

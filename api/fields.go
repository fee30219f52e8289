package api

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
)

// Field is one request field as each front end names it and bounds it:
// the API's JSON name (the root of a FieldError's path), the native CLI's
// option and its one-letter alias, the ioi form's option, how a value is
// written and bounded (Kind), the CLI's default and help. The CLI's limit
// options are made from this table, Validate bounds the limits by it, and
// front ends word a FieldError from it, so the same mistake reads
// "commands[0].binds[0].host" over HTTP, "--bind" on the command line and
// "--dir" in the ioi form.
type Field struct {
	JSON  string
	Flag  string // isolate run's option, without dashes; "" where it has none
	Short string // its one-letter alias
	IOI   string // the ioi form's option, without dashes; "" where it has none
	Kind  Kind
	// Default is the CLI's default as its help shows it ("": none); the
	// request's 0 means the same (Defaults).
	Default string
	Usage   string // the CLI's help line
	// MaxItems bounds an array field as the service decodes a request
	// (0: the decoder's default), so that a body never becomes a million
	// structs.
	MaxItems int
}

// Kind is how a field's value is written on a command line, held in a
// Spec and bounded.
type Kind uint8

const (
	// Other: a front end reads and checks the field itself.
	Other Kind = iota
	// Duration: milliseconds in a Spec (*_ms); DUR on a command line
	// (ParseDuration). 0 to 1e9 ms, or Unlimited.
	Duration
	// Size: bytes in a Spec (*_bytes); SIZE on a command line
	// (ParseSize). 0 to MaxSize, or Unlimited.
	Size
	// Count: a number of things (ParseCount). 0 to MaxSize, or Unlimited.
	Count
	// CPUs: CPU bandwidth, a fraction of the machine's CPUs (ParseCPUs).
	CPUs
)

// Fields are the request's fields that have an option, or a bound.
var Fields = []Field{
	{JSON: "args", MaxItems: 4096},
	{JSON: "cwd", Flag: "chdir", IOI: "chdir"},
	{JSON: "net", Flag: "net", IOI: "share-net"},
	{JSON: "network", Flag: "net"},
	{JSON: "box_id", Flag: "box-id", IOI: "box-id"},
	{JSON: "image", Flag: "image"},
	{JSON: "lang", Flag: "lang"},
	{JSON: "seccomp", Flag: "seccomp"},
	{JSON: "cpu_time_ms", Flag: "time", Short: "t", IOI: "time", Kind: Duration,
		Usage: "CPU time limit `DUR` of the whole program"},
	{JSON: "wall_time_ms", Flag: "wall-time", Short: "w", IOI: "wall-time", Kind: Duration,
		Usage: "wall-clock limit `DUR` (default 2×time+1s, else 60s)"},
	{JSON: "extra_time_ms", Flag: "extra-time", Short: "x", IOI: "extra-time", Kind: Duration,
		Usage: "kill only after time+`DUR`"},
	{JSON: "memory_bytes", Flag: "mem", Short: "m", IOI: "cg-mem", Kind: Size, Default: "512M",
		Usage: "memory limit `SIZE` (cgroup)"},
	{JSON: "address_space_bytes", IOI: "mem", Kind: Size},
	{JSON: "pids", Flag: "pids", Short: "p", IOI: "processes", Kind: Count, Default: "64",
		Usage: "processes and threads at once"},
	{JSON: "cpus", Flag: "cpus", Kind: CPUs, Usage: "CPU bandwidth `F` (e.g. 0.5)"},
	{JSON: "file_size_bytes", Flag: "fsize", Short: "f", IOI: "fsize", Kind: Size, Default: "64M",
		Usage: "largest file `SIZE`"},
	{JSON: "tmp_size_bytes", Flag: "tmp-size", Kind: Size, Default: "64M", Usage: "`SIZE` of /box and /tmp"},
	{JSON: "open_files", Flag: "open-files", IOI: "open-files", Kind: Count, Default: "256", Usage: "RLIMIT_NOFILE"},
	{JSON: "stack_bytes", Flag: "stack", IOI: "stack", Kind: Size, Default: "8M", Usage: "RLIMIT_STACK `SIZE`"},
	{JSON: "output_limit_bytes", Flag: "output-limit", Kind: Size, Default: "1M", Usage: "bytes kept per captured stream"},
	{JSON: "binds", Flag: "bind", IOI: "dir", MaxItems: 256},
	{JSON: "copy_in", Flag: "copy-in", MaxItems: 256},
	{JSON: "copy_out", Flag: "copy-out", MaxItems: 256},
	{JSON: "env", Flag: "env", IOI: "env", MaxItems: 1024},
}

// Set parses text, as a command line writes a value of f's kind, into s.
func (f Field) Set(s *Spec, text string) error {
	v := f.value(s)
	var err error
	switch f.Kind {
	case Duration:
		var d time.Duration
		if d, err = ParseDuration(text); err == nil {
			v.SetInt(Millis(d))
		}
	case Size:
		var n int64
		if n, err = ParseSize(text); err == nil {
			v.SetInt(n)
		}
	case Count:
		var n int64
		if n, err = ParseCount(text); err == nil {
			v.SetInt(n)
		}
	case CPUs:
		var n float64
		if n, err = ParseCPUs(text); err == nil {
			v.SetFloat(n)
		}
	default:
		return fmt.Errorf("%s: not a limit", f.JSON)
	}
	return err
}

// check bounds f's value in s, for the kinds that have bounds.
func (f Field) check(s *Spec) error {
	bad := func(format string, a ...any) error {
		return &FieldError{Field: f.JSON, Msg: fmt.Sprintf(format, a...)}
	}
	switch f.Kind {
	case Duration:
		if v := f.value(s).Int(); v < Unlimited || v > maxMs {
			return bad("%d: must be 0 to %d ms, or %d for none", v, int64(maxMs), Unlimited)
		}
	case Size, Count:
		if v := f.value(s).Int(); v < Unlimited || v > MaxSize {
			return bad("%d: must be 0 to %d, or %d for none", v, int64(MaxSize), Unlimited)
		}
	case CPUs:
		if v := f.value(s).Float(); math.IsNaN(v) || math.IsInf(v, 0) || (v < 0 && v != Unlimited) || v > MaxCPUs {
			return bad("%v: must be a number of CPUs up to %d, or %d for unlimited", v, MaxCPUs, Unlimited)
		}
	}
	return nil
}

// specFields maps a Spec's JSON names to its fields' indexes.
var specFields = func() map[string]int {
	t := reflect.TypeOf(Spec{})
	m := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		m[name] = i
	}
	return m
}()

// value is f's field in s (f must be one of Spec's).
func (f Field) value(s *Spec) reflect.Value {
	i, ok := specFields[f.JSON]
	if !ok {
		panic("api: no Spec field " + f.JSON)
	}
	return reflect.ValueOf(s).Elem().Field(i)
}

// FieldOf is the table's entry for a FieldError's path ("binds[0].host":
// binds), if it has one.
func FieldOf(path string) (Field, bool) {
	root, _, _ := strings.Cut(path, ".")
	root, _, _ = strings.Cut(root, "[")
	for _, f := range Fields {
		if f.JSON == root {
			return f, true
		}
	}
	return Field{}, false
}

// OptionError words err, if it is a FieldError on a field with an option,
// as that option, named by option from the field's entry: "--bind /x: no
// such file or directory". Any other error is err.
func OptionError(err error, option func(Field) string) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	if f, ok := FieldOf(fe.Field); ok && option(f) != "" {
		return fmt.Errorf("--%s %s", option(f), fe.Msg)
	}
	return err
}

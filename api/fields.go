package api

import (
	"errors"
	"fmt"
	"strings"
)

// Field is one request field as each front end names it: the API's JSON
// name (the root of a FieldError's path), the native CLI's option and the
// ioi form's. Front ends word a FieldError from this table, so the same
// mistake reads "commands[0].binds[0].host" over HTTP, "--bind" on the
// command line and "--dir" in the ioi form.
type Field struct {
	JSON string
	Flag string // isolate run's option, without dashes
	IOI  string // the ioi form's option, without dashes; "" where it has none
}

// Fields are the request's fields that have an option.
var Fields = []Field{
	{"cwd", "chdir", "chdir"},
	{"net", "net", "share-net"},
	{"box_id", "box-id", "box-id"},
	{"image", "image", ""},
	{"lang", "lang", ""},
	{"seccomp", "seccomp", ""},
	{"cpu_time_ms", "time", "time"},
	{"wall_time_ms", "wall-time", "wall-time"},
	{"extra_time_ms", "extra-time", "extra-time"},
	{"memory_bytes", "mem", "cg-mem"},
	{"address_space_bytes", "", "mem"},
	{"pids", "pids", "processes"},
	{"cpus", "cpus", ""},
	{"file_size_bytes", "fsize", "fsize"},
	{"tmp_size_bytes", "tmp-size", ""},
	{"open_files", "open-files", "open-files"},
	{"stack_bytes", "stack", "stack"},
	{"output_limit_bytes", "output-limit", ""},
	{"binds", "bind", "dir"},
	{"copy_in", "copy-in", ""},
	{"copy_out", "copy-out", ""},
	{"env", "env", "env"},
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

package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/isolate-sandbox/isolate/api"
)

// maxBody bounds a request body: inline files belong in the file store
// beyond this.
const maxBody = 64 << 20

// decode reads one JSON value of type T from body, strictly: unknown
// fields, wrong types and trailing data are a *api.FieldError naming the
// field's path ("commands[0].stdin.txt"), so the client learns which.
func decode[T any](body io.Reader, v *T) error {
	data, err := io.ReadAll(io.LimitReader(body, maxBody+1))
	if err != nil {
		return &api.FieldError{Field: "(body)", Msg: err.Error()}
	}
	if len(data) > maxBody {
		return &api.FieldError{Field: "(body)", Msg: fmt.Sprintf("larger than %d bytes (upload big files to /v1/files)", maxBody)}
	}
	// First the shape, generically, to name an unknown field's path
	// (encoding/json's own error does not say where the field was).
	var generic any
	gd := json.NewDecoder(bytes.NewReader(data))
	gd.UseNumber()
	if err := gd.Decode(&generic); err != nil {
		return syntaxError(data, err)
	}
	if gd.More() {
		return &api.FieldError{Field: "(body)", Msg: "data after the JSON value"}
	}
	if err := checkFields(generic, reflect.TypeOf(v).Elem(), ""); err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &api.FieldError{Field: jsonPath(te.Field), Msg: fmt.Sprintf("expected %s, got a JSON %s", describeType(te.Type), te.Value)}
		}
		return &api.FieldError{Field: "(body)", Msg: err.Error()}
	}
	return nil
}

func syntaxError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		return &api.FieldError{Field: "(body)", Msg: fmt.Sprintf("malformed JSON at line %d, byte %d: %v", line, se.Offset, err)}
	}
	if errors.Is(err, io.EOF) {
		return &api.FieldError{Field: "(body)", Msg: "empty body: expected a JSON object"}
	}
	return &api.FieldError{Field: "(body)", Msg: "malformed JSON: " + err.Error()}
}

// jsonPath turns encoding/json's "commands.0.args" into "commands[0].args".
func jsonPath(p string) string {
	var b strings.Builder
	for i, part := range strings.Split(p, ".") {
		if _, err := strconv.Atoi(part); err == nil {
			b.WriteString("[" + part + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(part)
	}
	return b.String()
}

func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

// checkFields walks a generically decoded JSON value beside the Go type
// it is meant for and returns the first key the type has no field for,
// or the first value of the wrong type, with its path.
func checkFields(v any, t reflect.Type, path string) error {
	at := path
	if at == "" {
		at = "(body)"
	}
	wrong := func(got string) error {
		return &api.FieldError{Field: at, Msg: fmt.Sprintf("expected %s, got %s", describeType(t), got)}
	}
	if v == nil {
		return nil // null: the zero value, as encoding/json does
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch x := v.(type) {
	case map[string]any:
		if t.Kind() == reflect.Map {
			for k, sub := range x {
				if err := checkFields(sub, t.Elem(), path+"."+k); err != nil {
					return err
				}
			}
			return nil
		}
		if t.Kind() != reflect.Struct {
			return wrong("an object")
		}
		fields := jsonFields(t)
		for k, sub := range x {
			ft, ok := fields[k]
			p := k
			if path != "" {
				p = path + "." + k
			}
			if !ok {
				return &api.FieldError{Field: p, Msg: "unknown field"}
			}
			if err := checkFields(sub, ft, p); err != nil {
				return err
			}
		}
	case []any:
		if t.Kind() != reflect.Slice || t.Elem().Kind() == reflect.Uint8 {
			return wrong("an array")
		}
		for i, sub := range x {
			if err := checkFields(sub, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case string:
		if t.Kind() != reflect.String && !(t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8) {
			return wrong(fmt.Sprintf("the string %q", x))
		}
	case bool:
		if t.Kind() != reflect.Bool {
			return wrong(fmt.Sprint(x))
		}
	case json.Number:
		switch t.Kind() {
		case reflect.Float64, reflect.Float32:
		case reflect.Int, reflect.Int64, reflect.Int32:
			if _, err := strconv.ParseInt(string(x), 10, 64); err != nil {
				return wrong("the number " + string(x))
			}
		case reflect.Uint32, reflect.Uint64:
			if _, err := strconv.ParseUint(string(x), 10, 64); err != nil {
				return wrong("the number " + string(x))
			}
		default:
			return wrong("the number " + string(x))
		}
	}
	return nil
}

// jsonFields maps the JSON names of a struct's fields, with embedded
// structs' fields promoted (the shallower one wins, as in encoding/json),
// to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var embedded []reflect.Type
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			embedded = append(embedded, f.Type)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	for _, et := range embedded {
		for et.Kind() == reflect.Pointer {
			et = et.Elem()
		}
		for name, ft := range jsonFields(et) {
			if _, ok := out[name]; !ok {
				out[name] = ft
			}
		}
	}
	return out
}

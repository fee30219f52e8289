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

// DefaultMaxBodyBytes bounds a request body unless the service says
// otherwise: inline files belong in the file store beyond this.
const DefaultMaxBodyBytes = 4 << 20

// maxInlineBytes bounds what one copy-out or pipe recording puts inline
// in an answer.
const maxInlineBytes = 64 << 20

// maxItems bounds every array of a request while it is decoded, by the
// array's JSON name (any other array: defaultMaxItems), so that a body of
// "{},{},..." never becomes a million structs: a spec's arrays by
// api.Fields, the request's own here.
var maxItems = func() map[string]int {
	m := map[string]int{"pipes": 256}
	for _, f := range api.Fields {
		if f.MaxItems > 0 {
			m[f.JSON] = f.MaxItems
		}
	}
	return m
}()

const defaultMaxItems = 256

// errBodyTooLarge is a body beyond the service's limit: 413.
type errBodyTooLarge struct{ limit int64 }

func (e errBodyTooLarge) Error() string {
	return fmt.Sprintf("the body is larger than %d bytes, this service's limit (--max-body; upload big files to /v1/files)", e.limit)
}

// decode reads one JSON value of type T from body, strictly: unknown
// fields, wrong types, arrays beyond their bound and trailing data are a
// *api.FieldError naming the field's path ("commands[0].stdin.txt"), so
// the client learns which. The body is read up to limit bytes (beyond:
// errBodyTooLarge), walked once token by token to check its shape
// against T without building anything, and only then decoded into v:
// what decoding makes is bounded by the body's size and the arrays'
// bounds. commands bounds the commands array.
func decode[T any](body io.Reader, v *T, limit int64, commands int) error {
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return &api.FieldError{Field: "(body)", Msg: err.Error()}
	}
	if int64(len(data)) > limit {
		return errBodyTooLarge{limit}
	}
	// First the shape, walked token by token, to name an unknown field's
	// path (encoding/json's own error does not say where the field was)
	// and to refuse an array past its bound before it is built.
	sc := shapeChecker{d: json.NewDecoder(bytes.NewReader(data)), commands: commands}
	sc.d.UseNumber()
	if err := sc.value(reflect.TypeOf(v).Elem(), "", ""); err != nil {
		return sc.failure(data, err)
	}
	if _, err := sc.d.Token(); err != io.EOF {
		return &api.FieldError{Field: "(body)", Msg: "data after the JSON value"}
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

// shapeChecker walks a JSON value token by token beside the Go type it
// is meant for and returns the first key the type has no field for, the
// first value of the wrong type, or the first array past its bound, with
// its path. It keeps nothing but the path.
type shapeChecker struct {
	d        *json.Decoder
	commands int // bound of "commands"
}

// syntaxFailure is a token the decoder could not read.
type syntaxFailure struct{ err error }

func (e syntaxFailure) Error() string { return e.err.Error() }

func (sc *shapeChecker) token() (json.Token, error) {
	tok, err := sc.d.Token()
	if err != nil {
		return nil, syntaxFailure{err}
	}
	return tok, nil
}

func (sc *shapeChecker) failure(data []byte, err error) error {
	if se, ok := err.(syntaxFailure); ok {
		return syntaxError(data, se.err)
	}
	return err
}

// value checks the next value against t; name is the field's JSON name
// (for an array's bound), path its place in the request.
func (sc *shapeChecker) value(t reflect.Type, path, name string) error {
	at := path
	if at == "" {
		at = "(body)"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	wrong := func(got string) error {
		return &api.FieldError{Field: at, Msg: fmt.Sprintf("expected %s, got %s", describeType(t), got)}
	}
	tok, err := sc.token()
	if err != nil {
		return err
	}
	if t.Kind() == reflect.Interface { // a scalar of any type; the handler checks it
		if _, ok := tok.(json.Delim); ok {
			return &api.FieldError{Field: at, Msg: "expected a string or a number, got an object or array"}
		}
		return nil
	}
	switch x := tok.(type) {
	case nil:
		return nil // null: the zero value, as encoding/json does
	case json.Delim:
		if x == '[' {
			return sc.array(t, path, name, wrong)
		}
		return sc.object(t, path, wrong)
	case string:
		if t.Kind() != reflect.String && !(t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8) {
			return wrong(fmt.Sprintf("the string %q", truncated(x, 64)))
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
				return wrong("the number " + truncated(string(x), 64))
			}
		case reflect.Uint32, reflect.Uint64:
			if _, err := strconv.ParseUint(string(x), 10, 64); err != nil {
				return wrong("the number " + truncated(string(x), 64))
			}
		default:
			return wrong("the number " + truncated(string(x), 64))
		}
	}
	return nil
}

func (sc *shapeChecker) object(t reflect.Type, path string, wrong func(string) error) error {
	var fields map[string]reflect.Type
	switch t.Kind() {
	case reflect.Map:
	case reflect.Struct:
		fields = jsonFields(t)
	default:
		return wrong("an object")
	}
	for sc.d.More() {
		tok, err := sc.token()
		if err != nil {
			return err
		}
		k, _ := tok.(string)
		p := k
		if path != "" {
			p = path + "." + k
		}
		ft := t
		if t.Kind() == reflect.Map {
			ft = t.Elem()
		} else if ft = fields[k]; ft == nil {
			return &api.FieldError{Field: truncated(p, 256), Msg: "unknown field"}
		}
		if err := sc.value(ft, p, k); err != nil {
			return err
		}
	}
	_, err := sc.token() // }
	return err
}

func (sc *shapeChecker) array(t reflect.Type, path, name string, wrong func(string) error) error {
	if t.Kind() != reflect.Slice || t.Elem().Kind() == reflect.Uint8 {
		return wrong("an array")
	}
	bound, ok := maxItems[name]
	switch {
	case name == "commands" && sc.commands > 0:
		bound = sc.commands
	case !ok:
		bound = defaultMaxItems
	}
	for i := 0; sc.d.More(); i++ {
		if i == bound {
			return &api.FieldError{Field: path, Msg: fmt.Sprintf("more than %d items, this service's bound", bound)}
		}
		if err := sc.value(t.Elem(), fmt.Sprintf("%s[%d]", path, i), ""); err != nil {
			return err
		}
	}
	_, err := sc.token() // ]
	return err
}

// truncated keeps an error message short whatever the client sent.
func truncated(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
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

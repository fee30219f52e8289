// Package jsonout writes a value as JSON the way encoding/json would,
// holding no more in memory than the value and a few small pieces: its
// large strings and byte slices (a run's captured output, a copied-out
// file) are written out in pieces from the value itself. The service's
// answers and the CLI's reports (--json, --report, also when the service
// runs a handed-over command) go through it: encoding/json builds the
// whole text in memory, each byte of output up to six times ("\u0000"),
// twice over as its buffer grows.
package jsonout

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"unicode/utf8"
)

// LiftAbove is the size from which a string or []byte of a value is
// written on its own, in pieces, rather than through encoding/json.
const LiftAbove = 32 << 10

// Options are encoding/json's Encoder settings.
type Options struct {
	EscapeHTML bool   // as json.Encoder.SetEscapeHTML
	Indent     string // as json.Encoder.SetIndent("", Indent); "": one line
}

// Encoded is an encoded value: the small encoding of the value with its
// large strings swapped for placeholders, and those strings, each
// written out in pieces from the original.
type Encoded struct {
	head  []byte
	items []lifted // in the order of their placeholders in head
	pos   []int    // where each placeholder starts in head
	esc   bool
}

// Encode encodes v as json.Encoder.Encode would with o (a newline
// after), holding in memory no more than v and a few pieces. v's large
// strings are swapped for placeholders while it is encoded, and back.
func Encode(v any, o Options) (*Encoded, error) {
	var l lifter
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		l.walk(rv)
	} else {
		cp := reflect.New(rv.Type())
		cp.Elem().Set(rv)
		l.walk(cp)
		v = cp.Interface()
	}
	var head bytes.Buffer
	enc := json.NewEncoder(&head)
	enc.SetEscapeHTML(o.EscapeHTML)
	if o.Indent != "" {
		enc.SetIndent("", o.Indent)
	}
	err := enc.Encode(v)
	l.restore()
	if err != nil {
		return nil, err
	}
	a := &Encoded{head: head.Bytes(), esc: o.EscapeHTML}
	type at struct{ pos, item int }
	var found []at
	for i, it := range l.items {
		if pos := bytes.Index(a.head, []byte(it.placeholder)); pos >= 0 {
			found = append(found, at{pos, i})
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].pos < found[j].pos })
	for _, f := range found {
		a.items = append(a.items, l.items[f.item])
		a.pos = append(a.pos, f.pos)
	}
	return a, nil
}

// Size is the encoding's length when it is known without writing it out
// (nothing was lifted), else -1.
func (a *Encoded) Size() int {
	if len(a.items) > 0 {
		return -1
	}
	return len(a.head)
}

// Held is about the memory the encoding holds: its small encoding and
// the strings it writes out in pieces (a line waiting to be written is
// this much, whatever the bytes of its value).
func (a *Encoded) Held() int64 {
	n := int64(cap(a.head))
	for _, it := range a.items {
		n += int64(len(it.str) + len(it.raw))
	}
	return n
}

// Lifted is how many strings are written in pieces.
func (a *Encoded) Lifted() int { return len(a.items) }

// Write writes the encoding to w, the large strings a piece at a time.
func (a *Encoded) Write(w io.Writer) error {
	from := 0
	for i, it := range a.items {
		if _, err := w.Write(a.head[from:a.pos[i]]); err != nil {
			return err
		}
		if err := it.write(w, a.esc); err != nil {
			return err
		}
		from = a.pos[i] + len(it.placeholder)
	}
	_, err := w.Write(a.head[from:])
	return err
}

// lifter swaps a value's large strings for placeholders and back.
type lifter struct {
	nonce []byte
	items []lifted
}

type lifted struct {
	field       reflect.Value // the string or []byte field
	str         string
	raw         []byte
	isBytes     bool
	placeholder string // as it appears in the small encoding, quotes included
}

func (l *lifter) walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			l.walk(v.Elem())
		}
	case reflect.Struct:
		for _, i := range liftable(v.Type()) {
			l.walk(v.Field(i))
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			if v.Len() > LiftAbove && v.CanSet() {
				l.swap(v, true)
			}
			return
		}
		for i := 0; i < v.Len(); i++ {
			l.walk(v.Index(i))
		}
	case reflect.String:
		if v.Len() > LiftAbove && v.CanSet() {
			l.swap(v, false)
		}
	}
}

// liftableFields caches liftable.
var liftableFields sync.Map // reflect.Type -> []int

// liftable lists the exported fields of struct type t that may hold a
// string or bytes (numbers and booleans are skipped unseen).
func liftable(t reflect.Type) []int {
	if f, ok := liftableFields.Load(t); ok {
		return f.([]int)
	}
	var fields []int
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		switch f.Type.Kind() {
		case reflect.String, reflect.Slice, reflect.Pointer, reflect.Interface, reflect.Struct:
			if f.IsExported() {
				fields = append(fields, i)
			}
		}
	}
	liftableFields.Store(t, fields)
	return fields
}

// swap replaces one field by a placeholder no encoding holds otherwise: it
// names a random nonce of this encoding's.
func (l *lifter) swap(v reflect.Value, isBytes bool) {
	if l.nonce == nil {
		l.nonce = make([]byte, 12)
		rand.Read(l.nonce)
	}
	it := lifted{field: v, isBytes: isBytes}
	// 15 bytes: a whole number of base64 groups, so that its base64 is
	// found as it is.
	id := append(append([]byte{}, l.nonce...), byte(len(l.items)>>16), byte(len(l.items)>>8), byte(len(l.items)))
	if isBytes {
		it.raw = v.Bytes()
		v.SetBytes(id)
		it.placeholder = `"` + base64.StdEncoding.EncodeToString(id) + `"`
	} else {
		it.str = v.String()
		s := "lifted-" + hex.EncodeToString(id)
		v.SetString(s)
		it.placeholder = strconv.Quote(s)
	}
	l.items = append(l.items, it)
}

func (l *lifter) restore() {
	for _, it := range l.items {
		if it.isBytes {
			it.field.SetBytes(it.raw)
		} else {
			it.field.SetString(it.str)
		}
	}
}

// write writes the lifted value as encoding/json would, a piece at a time.
func (it lifted) write(w io.Writer, escapeHTML bool) error {
	if it.isBytes {
		if _, err := io.WriteString(w, `"`); err != nil {
			return err
		}
		enc := base64.NewEncoder(base64.StdEncoding, w)
		if _, err := enc.Write(it.raw); err != nil {
			return err
		}
		if err := enc.Close(); err != nil {
			return err
		}
		_, err := io.WriteString(w, `"`)
		return err
	}
	return writeJSONString(w, it.str, escapeHTML)
}

// writeJSONString writes s quoted and escaped as encoding/json would, in
// pieces cut before a byte that starts a UTF-8 sequence, so that each
// piece escapes as it would within the whole.
func writeJSONString(w io.Writer, s string, escapeHTML bool) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(escapeHTML)
	if _, err := io.WriteString(w, `"`); err != nil {
		return err
	}
	const piece = 16 << 10
	for len(s) > 0 {
		n := min(piece, len(s))
		// A UTF-8 sequence is at most 4 bytes: past 3 more, the bytes
		// at the cut belong to no sequence that crosses it.
		for k := 0; k < utf8.UTFMax-1 && n < len(s) && !utf8.RuneStart(s[n]); k++ {
			n++
		}
		buf.Reset()
		enc.Encode(s[:n])
		// "...."\n: the piece without its quotes and newline.
		if _, err := w.Write(buf.Bytes()[1 : buf.Len()-2]); err != nil {
			return err
		}
		s = s[n:]
	}
	_, err := io.WriteString(w, `"`)
	return err
}

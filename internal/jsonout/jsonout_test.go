package jsonout

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// With every option, the encoding written in pieces is byte for byte
// encoding/json's, and the value is left as it was.
func TestEncodeIsEncodingJSONs(t *testing.T) {
	var raw strings.Builder
	for i := 0; raw.Len() < 3*LiftAbove; i++ {
		raw.WriteString(string(rune(i % 0x3000)))
		raw.WriteByte(byte(i)) // control bytes, and invalid UTF-8
		raw.WriteString("<&>\u2028é")
	}
	type inner struct {
		Data  []byte `json:"data"`
		Small string `json:"small"`
	}
	type value struct {
		Stdout string  `json:"stdout"`
		Inner  *inner  `json:"inner"`
		List   []inner `json:"list"`
		N      int     `json:"n"`
	}
	v := &value{Stdout: raw.String(), Inner: &inner{Data: []byte(raw.String()), Small: "<b>"}, List: []inner{{Small: raw.String()}}, N: 7}
	for _, o := range []Options{{}, {EscapeHTML: true}, {EscapeHTML: true, Indent: "  "}, {Indent: "\t"}} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(o.EscapeHTML)
		enc.SetIndent("", o.Indent)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		e, err := Encode(v, o)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := e.Write(&got); err != nil {
			t.Fatal(err)
		}
		if e.Lifted() != 3 || e.Size() != -1 {
			t.Errorf("%+v: %d strings lifted, want 3", o, e.Lifted())
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%+v: the encoding differs from encoding/json's", o)
		}
		if v.Stdout != raw.String() || string(v.Inner.Data) != raw.String() || v.List[0].Small != raw.String() {
			t.Fatalf("%+v: the value was changed", o)
		}
	}
}

// Held counts what an encoding keeps: a large string once (written out
// from the value), a small one as its JSON (NUL bytes six times over).
func TestHeld(t *testing.T) {
	big := strings.Repeat("\x00", 100<<10)
	a, err := Encode(struct{ S string }{big}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if h := a.Held(); h < 100<<10 || h > 101<<10 {
		t.Errorf("a lifted 100 KiB string: %d held", h)
	}
	small := strings.Repeat("\x00", 1<<10)
	if a, err = Encode(struct{ S string }{small}, Options{}); err != nil {
		t.Fatal(err)
	}
	if h := a.Held(); h < 6<<10 {
		t.Errorf("a 1 KiB string of NUL bytes: %d held, want its 6 KiB of JSON", h)
	}
}

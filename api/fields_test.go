package api

import (
	"math"
	"strings"
	"testing"
)

// Every field of the table is one of Spec's, and every limit can be set
// from a command line's text and is bounded by Validate under its own
// name.
func TestFieldsDescribeSpec(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Fields {
		if _, ok := specFields[f.JSON]; !ok {
			t.Errorf("%s: no such Spec field", f.JSON)
		}
		if seen[f.JSON] {
			t.Errorf("%s: listed twice", f.JSON)
		}
		seen[f.JSON] = true
		if f.Kind == Other {
			continue
		}
		s := &Spec{Args: []string{"true"}}
		if err := f.Set(s, "unlimited"); err != nil {
			t.Errorf("%s: set unlimited: %v", f.JSON, err)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s unlimited: %v", f.JSON, err)
		}
		if f.Default != "" {
			if err := f.Set(s, f.Default); err != nil {
				t.Errorf("%s: its default %q: %v", f.JSON, f.Default, err)
			}
		}
		if err := f.Set(s, "NaN"); err == nil {
			t.Errorf("%s: NaN accepted", f.JSON)
		}
		// A value out of bounds is refused, naming the field.
		v := f.value(s)
		if f.Kind == CPUs {
			v.SetFloat(math.NaN())
		} else {
			v.SetInt(-2)
		}
		err := s.Validate()
		if fe, ok := err.(*FieldError); !ok || fe.Field != f.JSON || !strings.Contains(fe.Msg, "must be") {
			t.Errorf("%s out of bounds: %v", f.JSON, err)
		}
	}
}

package isolate

import (
	"strings"
	"testing"
)

// A head-and-tail capture keeps the first and the last half of its limit
// whatever the sizes of the chunks it gets, marks the bytes cut between,
// splits no character, and keeps all of a stream within its limit.
func TestCaptureHeadAndTail(t *testing.T) {
	digits := "0123456789abcdefghijklmnopqrstuvwxyz"
	cases := []struct {
		in, want string
		limit    int64
		cut      bool
	}{
		{"", "", 10, false},
		{"short", "short", 10, false},
		{"0123456789", "0123456789", 10, false},
		{"012345678", "012345678", 10, false}, // past the head, within the limit
		{"0123456789a", "01234" + CutMarker(1) + "6789a", 10, true},
		{digits, "01234" + CutMarker(26) + "vwxyz", 10, true},
		{digits, "0123" + CutMarker(29) + "xyz", 7, true},
		{digits, "0", 1, true},
		{"ééééé", "é" + CutMarker(6) + "é", 6, true}, // 10 bytes: 3 of head, 3 of tail, each cut back to a character's edge
	}
	for _, tc := range cases {
		for _, chunk := range []int{1, 3, 7, 64} {
			c := capture{limit: tc.limit, headTail: true}
			for in := tc.in; in != ""; {
				n := min(chunk, len(in))
				c.keep([]byte(in[:n]))
				in = in[n:]
			}
			got, cut := c.kept()
			if got != tc.want || cut != tc.cut {
				t.Errorf("%q, limit %d, chunks of %d: %q (cut %v), want %q (cut %v)", tc.in, tc.limit, chunk, got, cut, tc.want, tc.cut)
			}
			if int64(len(got)) > tc.limit+MaxCutMarkerBytes {
				t.Errorf("%q: %d bytes kept, over the limit and the marker", tc.in, len(got))
			}
		}
	}
	// Bytes a driver skipped between the head and the tail it sent.
	c := capture{limit: 10, headTail: true}
	c.keep([]byte("01234"))
	c.skip(1000)
	c.keep([]byte("vwxyz"))
	if got, cut := c.kept(); got != "01234"+CutMarker(1000)+"vwxyz" || !cut {
		t.Errorf("with bytes skipped: %q", got)
	}
	// Head only, as a run's capture keeps.
	c = capture{limit: 4}
	c.keep([]byte(strings.Repeat("x", 10)))
	if got, cut := c.kept(); got != "xxxx" || !cut {
		t.Errorf("head only: %q %v", got, cut)
	}
}

package headtail

import (
	"strings"
	"testing"
)

// A head-and-tail buffer keeps the first and the last half of its limit
// whatever the sizes of the chunks it gets, marks the bytes cut between,
// splits no character, and keeps all of a stream within its limit.
func TestHeadAndTail(t *testing.T) {
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
			c := Buffer{Limit: tc.limit, HeadTail: true}
			for in := tc.in; in != ""; {
				n := min(chunk, len(in))
				c.Keep([]byte(in[:n]))
				in = in[n:]
			}
			got, cut := c.Kept()
			if got != tc.want || cut != tc.cut {
				t.Errorf("%q, limit %d, chunks of %d: %q (cut %v), want %q (cut %v)", tc.in, tc.limit, chunk, got, cut, tc.want, tc.cut)
			}
			if int64(len(got)) > tc.limit+MaxCutMarkerBytes {
				t.Errorf("%q: %d bytes kept, over the limit and the marker", tc.in, len(got))
			}
		}
	}
	// Bytes a driver skipped between the head and the tail it sent.
	c := Buffer{Limit: 10, HeadTail: true}
	c.Keep([]byte("01234"))
	c.Skip(1000)
	c.Keep([]byte("vwxyz"))
	if got, cut := c.Kept(); got != "01234"+CutMarker(1000)+"vwxyz" || !cut {
		t.Errorf("with bytes skipped: %q", got)
	}
	// Head only, as a run's capture keeps.
	c = Buffer{Limit: 4}
	c.Keep([]byte(strings.Repeat("x", 10)))
	if got, cut := c.Kept(); got != "xxxx" || !cut {
		t.Errorf("head only: %q %v", got, cut)
	}
}

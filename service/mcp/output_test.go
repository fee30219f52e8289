package mcp

import (
	"strings"
	"testing"
)

func TestHeadTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
		cut    bool
	}{
		{"empty", nil, "", false},
		{"short", []string{"hello\n", "world\n"}, "hello\nworld\n", false},
		{"exactly both ends", []string{strings.Repeat("a", headBytes+tailBytes)}, strings.Repeat("a", headBytes+tailBytes), false},
		{"one byte over", []string{strings.Repeat("a", headBytes), "b", strings.Repeat("c", tailBytes)},
			strings.Repeat("a", headBytes) + "\n[... 1 bytes cut: the first 16384 and the last 16384 of 32769 are shown ...]\n" + strings.Repeat("c", tailBytes), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h headTail
			for _, w := range tc.writes {
				h.Write([]byte(w))
			}
			got, cut := h.text()
			if got != tc.want || cut != tc.cut {
				t.Errorf("got %q (cut %v), want %q (cut %v)", trunc(got), cut, trunc(tc.want), tc.cut)
			}
		})
	}
	// Many small writes: the tail is the last bytes, in order.
	var h headTail
	var all strings.Builder
	for i := 0; i < 20000; i++ {
		line := strings.Repeat(string(rune('a'+i%26)), i%7) + "\n"
		h.Write([]byte(line))
		all.WriteString(line)
	}
	got, cut := h.text()
	s := all.String()
	if !cut || !strings.HasPrefix(got, s[:headBytes]) || !strings.HasSuffix(got, s[len(s)-tailBytes:]) {
		t.Errorf("head or tail wrong after small writes (cut %v)", cut)
	}
	if h.total != int64(len(s)) {
		t.Errorf("total %d, want %d", h.total, len(s))
	}
}

func TestHeadTailKeepsRunesWhole(t *testing.T) {
	var h headTail
	h.Write([]byte(strings.Repeat("é", headBytes))) // 2 bytes each: the head ends in a whole rune
	h.Write([]byte("x" + strings.Repeat("é", tailBytes/2) + "y"))
	got, _ := h.text()
	if !strings.HasSuffix(got, "y") || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("a rune was cut: ...%q", got[len(got)-20:])
	}
	for _, r := range got {
		if r == '\uFFFD' {
			t.Fatal("invalid UTF-8 in the kept text")
		}
	}
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:40] + "..." + s[len(s)-40:]
	}
	return s
}

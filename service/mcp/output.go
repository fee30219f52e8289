package mcp

import (
	"fmt"
	"unicode/utf8"
)

// Output a tool keeps per stream: its first headBytes and its last
// tailBytes. A model needs both ends (the first error, and the summary
// or traceback at the end) and not megabytes between them.
const (
	headBytes = 16 << 10
	tailBytes = 16 << 10
)

// headTail keeps the head and the tail of a stream as it passes, in
// bounded memory, and counts every byte.
type headTail struct {
	head  []byte
	tail  []byte // a ring of the last tailBytes bytes past the head
	next  int    // where the ring writes next, once full
	total int64
}

func (h *headTail) Write(p []byte) (int, error) {
	n := len(p)
	h.total += int64(n)
	if room := headBytes - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 {
		if len(h.tail) < tailBytes {
			k := min(tailBytes-len(h.tail), len(p))
			h.tail = append(h.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(h.tail[h.next:], p)
		h.next = (h.next + k) % tailBytes
		p = p[k:]
	}
	return n, nil
}

// text is what was kept, with a marker where bytes were cut, and
// whether any were.
func (h *headTail) text() (string, bool) {
	tail := append(append([]byte(nil), h.tail[h.next:]...), h.tail[:h.next]...)
	cut := h.total - int64(len(h.head)) - int64(len(tail))
	if cut <= 0 {
		return string(append(h.head, tail...)), false
	}
	head, tail := trimUTF8(h.head, false), trimUTF8(tail, true)
	return fmt.Sprintf("%s\n[... %d bytes cut: the first %d and the last %d of %d are shown ...]\n%s",
		head, cut, headBytes, tailBytes, h.total, tail), true
}

// trimUTF8 drops a rune cut in two at the end of b (at its start when
// atStart), so that the text stays valid where it was cut.
func trimUTF8(b []byte, atStart bool) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if atStart {
			if utf8.RuneStart(b[0]) {
				return b
			}
			b = b[1:]
			continue
		}
		r, size := utf8.DecodeLastRune(b)
		if r != utf8.RuneError || size != 1 {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

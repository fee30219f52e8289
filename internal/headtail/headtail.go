// Package headtail keeps a stream's output within a limit: its first
// bytes, or its first and last half with the cut marked between, the
// rule every front end's output follows (runs, session commands, code
// contexts).
package headtail

import (
	"fmt"
	"math"
	"unicode/utf8"
	"unsafe"
)

// Buffer keeps the first Limit bytes written to it (HeadTail: the first
// and the last half of them, the cut marked between); 0: all. Its zero
// value with a Limit set is ready.
type Buffer struct {
	Limit     int64
	HeadTail  bool
	buf       []byte // the head: all that is kept, unless HeadTail
	ring      []byte // HeadTail: the last Limit/2 bytes past the head, from ringAt once full
	ringAt    int
	total     int64 // bytes seen
	truncated bool
}

// CutMarker is what stands where output was cut between its head and its
// tail (the Python client's marker too).
func CutMarker(n int64) string { return fmt.Sprintf("\n[... %d bytes cut ...]\n", n) }

// MaxCutMarkerBytes is the longest a CutMarker is: a stream kept head and
// tail holds at most its limit and this.
var MaxCutMarkerBytes = int64(len(CutMarker(math.MaxInt64)))

// Keep keeps what of p the rule keeps.
func (c *Buffer) Keep(p []byte) {
	c.total += int64(len(p))
	headLimit := c.Limit
	if c.HeadTail {
		headLimit -= c.Limit / 2
	}
	var past []byte
	if room := headLimit - int64(len(c.buf)); c.Limit > 0 && int64(len(p)) > room {
		p, past = p[:max(room, 0)], p[max(room, 0):]
		if !c.HeadTail {
			c.truncated = true
		}
	}
	// Grown as append would, but never past the head's limit: append's
	// doubling would reserve up to twice the limit.
	if need := len(c.buf) + len(p); need > cap(c.buf) && c.Limit > 0 {
		grown := make([]byte, len(c.buf), min(max(2*cap(c.buf), need, 4<<10), int(headLimit)))
		copy(grown, c.buf)
		c.buf = grown
	}
	c.buf = append(c.buf, p...)
	if c.HeadTail && len(past) > 0 {
		c.keepTail(past)
	}
}

// keepTail keeps the last limit/2 bytes past the head in the ring, which
// lies in the head's buffer, after it: joining them (kept) takes no more
// memory.
func (c *Buffer) keepTail(p []byte) {
	n := int(c.Limit / 2)
	if n == 0 {
		c.truncated = true // a limit of 1: the head alone
		return
	}
	if len(p) >= n {
		p = p[len(p)-n:]
	}
	if c.ring == nil {
		grown := make([]byte, len(c.buf), len(c.buf)+n+int(MaxCutMarkerBytes))
		copy(grown, c.buf)
		c.buf = grown
		c.ring = c.buf[len(c.buf) : len(c.buf) : len(c.buf)+n]
	}
	for len(p) > 0 {
		if len(c.ring) < n {
			k := min(n-len(c.ring), len(p))
			c.ring, p = append(c.ring, p[:k]...), p[k:]
			continue
		}
		k := copy(c.ring[c.ringAt:], p)
		c.ringAt, p = (c.ringAt+k)%n, p[k:]
	}
}

// Skip counts n bytes of the stream that arrived past the head and before
// the bytes the next Keep gets, unseen (a driver cut them out); the next
// Keep must fill the tail.
func (c *Buffer) Skip(n int64) {
	c.total += n
}

// Kept is what the buffer kept, and whether anything was cut. With headTail, the head, the marker
// (when more than the limit came; cut where no character is split) and
// the tail are joined in place in the buffer the ring lies in.
func (c *Buffer) Kept() (string, bool) {
	if c.HeadTail && len(c.ring) > 0 {
		head, tail := c.buf, c.ring
		rotate(tail, c.ringAt)
		marker := ""
		if c.total > c.Limit {
			for i := len(head) - 1; i >= 0 && i >= len(head)-utf8.UTFMax+1; i-- {
				if utf8.RuneStart(head[i]) {
					if !utf8.FullRune(head[i:]) {
						head = head[:i]
					}
					break
				}
			}
			for i := 0; i < utf8.UTFMax-1 && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
				tail = tail[1:]
			}
			marker = CutMarker(c.total - int64(len(head)) - int64(len(tail)))
			c.truncated = true
		}
		joined := c.buf[:len(head)+len(marker)+len(tail)]
		copy(joined[len(head)+len(marker):], tail) // copy moves overlapping bytes right
		copy(joined[len(head):], marker)
		c.buf, c.ring, c.ringAt = joined, nil, 0
	}
	return unsafe.String(unsafe.SliceData(c.buf), len(c.buf)), c.truncated
}

// rotate turns b left by k bytes, in place.
func rotate(b []byte, k int) {
	reverse := func(b []byte) {
		for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
			b[i], b[j] = b[j], b[i]
		}
	}
	reverse(b[:k])
	reverse(b[k:])
	reverse(b)
}

package isolate

import (
	"fmt"
	"math"
	"os"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"
)

// capture reads one output stream of the program to its end: it keeps the
// first limit bytes (headTail: the first and the last half of them, the
// cut marked between), reads and drops the rest (so the program never
// blocks on a full pipe), and copies everything live to tee when set.
type capture struct {
	limit     int64
	headTail  bool
	buf       []byte // the head: all that is kept, unless headTail
	ring      []byte // headTail: the last limit/2 bytes past the head, from ringAt once full
	ringAt    int
	total     int64 // bytes seen
	truncated bool
	done      chan struct{}
	r         *os.File
}

// CutMarker is what stands where output was cut between its head and its
// tail (the Python client's marker too).
func CutMarker(n int64) string { return fmt.Sprintf("\n[... %d bytes cut ...]\n", n) }

// MaxCutMarkerBytes is the longest a CutMarker is: a stream kept head and
// tail holds at most its limit and this.
var MaxCutMarkerBytes = int64(len(CutMarker(math.MaxInt64)))

// chunks are the captures' read buffers, reused: a fresh 64 KiB per
// stream per run was cleared memory and garbage on every run of a service.
var chunks = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func startCapture(r *os.File, limit int64, headTail bool, tee interface{ Write([]byte) (int, error) }) *capture {
	c := &capture{limit: limit, headTail: headTail && limit > 0, done: make(chan struct{}), r: r}
	go func() {
		defer close(c.done)
		defer r.Close()
		buf := chunks.Get().(*[]byte)
		defer chunks.Put(buf)
		chunk := *buf
		teeFailed := false
		for {
			n, err := r.Read(chunk)
			if n > 0 {
				c.keep(chunk[:n])
				if tee != nil && !teeFailed {
					// A live copy that fails stops; the capture goes on.
					_, werr := tee.Write(chunk[:n])
					teeFailed = werr != nil
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return c
}

func (c *capture) keep(p []byte) {
	c.total += int64(len(p))
	headLimit := c.limit
	if c.headTail {
		headLimit -= c.limit / 2
	}
	var past []byte
	if room := headLimit - int64(len(c.buf)); c.limit > 0 && int64(len(p)) > room {
		p, past = p[:max(room, 0)], p[max(room, 0):]
		if !c.headTail {
			c.truncated = true
		}
	}
	// Grown as append would, but never past the head's limit: append's
	// doubling would reserve up to twice the limit.
	if need := len(c.buf) + len(p); need > cap(c.buf) && c.limit > 0 {
		grown := make([]byte, len(c.buf), min(max(2*cap(c.buf), need, 4<<10), int(headLimit)))
		copy(grown, c.buf)
		c.buf = grown
	}
	c.buf = append(c.buf, p...)
	if c.headTail && len(past) > 0 {
		c.keepTail(past)
	}
}

// keepTail keeps the last limit/2 bytes past the head in the ring, which
// lies in the head's buffer, after it: joining them (kept) takes no more
// memory.
func (c *capture) keepTail(p []byte) {
	n := int(c.limit / 2)
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

// skip counts n bytes of the stream that arrived past the head and before
// the bytes the next keep gets, unseen (a driver cut them out); the next
// keep must fill the tail.
func (c *capture) skip(n int64) {
	c.total += n
}

// result waits for the end of the stream. The string shares the
// capture's bytes, written no more: a copy would hold the output twice.
func (c *capture) result() (string, bool) {
	<-c.done
	return c.kept()
}

// kept is what the capture kept. With headTail, the head, the marker
// (when more than the limit came; cut where no character is split) and
// the tail are joined in place in the buffer the ring lies in.
func (c *capture) kept() (string, bool) {
	if c.headTail && len(c.ring) > 0 {
		head, tail := c.buf, c.ring
		rotate(tail, c.ringAt)
		marker := ""
		if c.total > c.limit {
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

// stopBy ends the capture at t at the latest, even if the stream is still
// open (a process the program left holds it): a session's command ends
// when its process does, as os/exec's WaitDelay has it.
func (c *capture) stopBy(t time.Time) { c.r.SetReadDeadline(t) }

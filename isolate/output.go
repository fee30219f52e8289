package isolate

import (
	"os"
	"sync"
	"time"
	"unsafe"
)

// capture reads one output stream of the program to its end: it keeps the
// first limit bytes, reads and drops the rest (so the program never blocks
// on a full pipe), and copies everything live to tee when set.
type capture struct {
	limit     int64
	buf       []byte
	truncated bool
	done      chan struct{}
	r         *os.File
}

// chunks are the captures' read buffers, reused: a fresh 64 KiB per
// stream per run was cleared memory and garbage on every run of a service.
var chunks = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func startCapture(r *os.File, limit int64, tee interface{ Write([]byte) (int, error) }) *capture {
	c := &capture{limit: limit, done: make(chan struct{}), r: r}
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
	room := c.limit - int64(len(c.buf))
	if c.limit <= 0 {
		room = int64(len(p)) // no limit
	}
	if int64(len(p)) > room {
		c.truncated = true
		p = p[:room]
	}
	// Grown as append would, but never past the limit: append's doubling
	// would reserve up to twice the limit.
	if need := len(c.buf) + len(p); need > cap(c.buf) && c.limit > 0 {
		grown := make([]byte, len(c.buf), min(max(2*cap(c.buf), need, 4<<10), int(c.limit)))
		copy(grown, c.buf)
		c.buf = grown
	}
	c.buf = append(c.buf, p...)
}

// result waits for the end of the stream. The string shares the
// capture's bytes, written no more: a copy would hold the output twice.
func (c *capture) result() (string, bool) {
	<-c.done
	return unsafe.String(unsafe.SliceData(c.buf), len(c.buf)), c.truncated
}

// stopBy ends the capture at t at the latest, even if the stream is still
// open (a process the program left holds it): a session's command ends
// when its process does, as os/exec's WaitDelay has it.
func (c *capture) stopBy(t time.Time) { c.r.SetReadDeadline(t) }

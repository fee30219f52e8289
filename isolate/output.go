package isolate

import (
	"os"
	"sync"
	"time"

	"github.com/isolate-sandbox/isolate/internal/headtail"
)

// capture reads one output stream of the program to its end: it keeps the
// first limit bytes (headTail: the first and the last half of them, the
// cut marked between), reads and drops the rest (so the program never
// blocks on a full pipe), and copies everything live to tee when set.
type capture struct {
	headtail.Buffer
	done chan struct{}
	r    *os.File
}

// MaxCutMarkerBytes is the longest a headtail.CutMarker is: a stream kept head and
// tail holds at most its limit and this.
var MaxCutMarkerBytes = headtail.MaxCutMarkerBytes

// chunks are the captures' read buffers, reused: a fresh 64 KiB per
// stream per run was cleared memory and garbage on every run of a service.
var chunks = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func startCapture(r *os.File, limit int64, headTail bool, tee interface{ Write([]byte) (int, error) }) *capture {
	c := &capture{Buffer: headtail.Buffer{Limit: limit, HeadTail: headTail && limit > 0}, done: make(chan struct{}), r: r}
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
				c.Keep(chunk[:n])
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

// result waits for the end of the stream. The string shares the
// capture's bytes, written no more: a copy would hold the output twice.
func (c *capture) result() (string, bool) {
	<-c.done
	return c.Kept()
}

// stopBy ends the capture at t at the latest, even if the stream is still
// open (a process the program left holds it): a session's command ends
// when its process does, as os/exec's WaitDelay has it.
func (c *capture) stopBy(t time.Time) { c.r.SetReadDeadline(t) }

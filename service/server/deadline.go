package server

import (
	"io"
	"net/http"
	"time"
)

// minBodyRate is the slowest a streamed body (a session's file, a
// command's stdin, a stored file) may arrive once readTimeout has passed:
// a client that sends less holds a connection and a request of the
// service's for nothing, and is cut off.
const minBodyRate = 64 << 10 // bytes a second

// deadlineBody is a request's body read within a deadline that grows with
// what arrived: readTimeout, and a second more for each minBodyRate
// bytes. A client that trickles (one byte a second) or stops is cut off
// there, its read failing.
type deadlineBody struct {
	body  io.Reader
	rc    *http.ResponseController
	start time.Time
	n     int64
}

// streamedBody is r's body under deadlineBody's rule; done clears the
// deadline, so that the connection's reads watch for the client going
// away again.
func streamedBody(w http.ResponseWriter, r *http.Request) (body io.Reader, done func()) {
	b := &deadlineBody{body: r.Body, rc: http.NewResponseController(w), start: time.Now()}
	return b, func() { b.rc.SetReadDeadline(time.Time{}) }
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(b.start.Add(readTimeout + time.Duration(b.n/minBodyRate)*time.Second))
	n, err := b.body.Read(p)
	b.n += int64(n)
	return n, err
}

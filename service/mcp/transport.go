package mcp

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeStdio serves one MCP connection on standard input and output
// until the client closes it or ctx ends; the sessions it made and did
// not keep end with it.
func ServeStdio(ctx context.Context, a API) error {
	s, c := newServer(a, nil)
	defer c.close()
	return s.Run(ctx, &sdk.StdioTransport{})
}

// sessionIdle ends an MCP session over HTTP that no request used this
// long, and with it the sessions it made.
const sessionIdle = 30 * time.Minute

// HTTPHandler serves MCP over streamable HTTP. For every request, who
// names its caller; an MCP session belongs to the caller that opened it,
// and another caller's requests for it answer 404, as for a session that
// does not exist. open is the API as the caller of a request that opens
// a session.
func HTTPHandler(who func(*http.Request) string, open func(*http.Request) API) http.Handler {
	h := &httpHandler{who: who, owners: map[string]string{}}
	h.inner = sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		s, _ := newServer(open(r), h.forget)
		return s
	}, &sdk.StreamableHTTPOptions{SessionTimeout: sessionIdle})
	return h
}

type httpHandler struct {
	inner  http.Handler
	who    func(*http.Request) string
	mu     sync.Mutex
	owners map[string]string // MCP session id -> its caller
}

func (h *httpHandler) forget(id string) {
	h.mu.Lock()
	delete(h.owners, id)
	h.mu.Unlock()
}

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	who := h.who(r)
	if id := r.Header.Get("Mcp-Session-Id"); id != "" {
		h.mu.Lock()
		owner, known := h.owners[id]
		h.mu.Unlock()
		if known && owner != who {
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
	}
	h.inner.ServeHTTP(&ownerRecorder{ResponseWriter: w, h: h, who: who}, r)
}

// ownerRecorder records the caller of a session the answer opens, before
// the answer leaves: the session id is in its headers.
type ownerRecorder struct {
	http.ResponseWriter
	h    *httpHandler
	who  string
	done bool
}

func (w *ownerRecorder) WriteHeader(code int) {
	if !w.done {
		w.done = true
		if id := w.Header().Get("Mcp-Session-Id"); id != "" {
			w.h.mu.Lock()
			if _, known := w.h.owners[id]; !known {
				w.h.owners[id] = w.who
			}
			w.h.mu.Unlock()
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *ownerRecorder) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *ownerRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *ownerRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *ownerRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

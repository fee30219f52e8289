package server

import (
	"context"
	"net/http"

	"github.com/isolate-sandbox/isolate/service/caller"
)

// Mount serves h at pattern beside the API, behind the same token check,
// counted in the metrics as endpoint: a front end of its own (MCP over
// HTTP) on the service's sockets. Call it before Serve.
func (s *Server) Mount(pattern, endpoint string, h http.Handler) {
	s.mux.HandleFunc(pattern, s.metrics.observe(endpoint, h.ServeHTTP))
}

// HandlerAs is the API's handlers answering every request as who, each
// audited as a tool call over MCP: for the MCP front end in this process,
// which speaks for its own caller (the caller of its connection), never
// for anyone else.
func (s *Server) HandlerAs(who caller.Caller) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(context.WithValue(r.Context(), callerKey{}, who), mcpKey{}, true)
		s.mux.ServeHTTP(w, r.WithContext(ctx))
	})
}

// mcpKey marks a request the MCP front end made (HandlerAs).
type mcpKey struct{}

// CallerOf is who sent r on the service's sockets.
func CallerOf(r *http.Request) caller.Caller { return callerOf(r) }

// OwnerOf names what r's caller owns: two requests of the same owner see
// the same sessions and files.
func OwnerOf(r *http.Request) string { return ownerOf(callerOf(r)) }

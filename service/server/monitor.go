package server

import (
	"errors"
	"net"
	"net/http"
	"time"
)

// The monitor: /metrics and /v1/health on a listener of their own
// (--monitor-listen, --monitor-socket), with no token and no run rights:
// a monitoring system reads them without holding the right to run code.
// Nothing else is served there.

// MonitorHandler answers GET /metrics and GET /v1/health only.
func (s *Server) MonitorHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.handler())
	mux.HandleFunc("GET /v1/health", s.handleHealth)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, errors.New("the monitor answers GET /metrics and GET /v1/health only"))
	})
	return mux
}

// ServeMonitor answers the monitor's requests on l until Shutdown, TCP
// included, without a token: what it answers runs nothing.
func (s *Server) ServeMonitor(l net.Listener) error {
	hs := &http.Server{
		Handler:           s.MonitorHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	s.mu.Lock()
	s.servers = append(s.servers, hs)
	s.mu.Unlock()
	err := hs.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

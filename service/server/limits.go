package server

import "net/http"

// GET /v1/limits: the largest limits this caller may ask (the service's
// caps, by request field; none for a caller they do not bound) and the
// sessions it may hold, so that a client (an agent's model) can size its
// requests before it sends them.
func (s *Server) handleLimits(w http.ResponseWriter, r *http.Request) {
	who := callerOf(r)
	limits := map[string]any{}
	if who.Capped() {
		for k, v := range s.cfg.Policy.Caps.Max() {
			limits[k] = v
		}
		limits["max_sessions"] = s.cfg.MaxSessionsPerCaller
	}
	limits["max_body_bytes"] = s.cfg.MaxBodyBytes
	if s.sessions != nil {
		limits["max_session_timeout_ms"] = s.cfg.SessionMaxTimeout.Milliseconds()
	}
	s.answer(w, http.StatusOK, limits)
}

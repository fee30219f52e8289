package server

import (
	"net/http"
	"sort"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// Root's view of every session: GET /v1/sessions?all=1 lists them all
// with their owners, GET /v1/sessions/{id}?all=1 shows any one. Another
// caller asking all=1 is refused (403, field all); without it everyone
// sees only its own.

// wantsAll says whether r asks for every caller's sessions; false with
// the client answered when the caller may not.
func wantsAll(w http.ResponseWriter, r *http.Request) (all, ok bool) {
	v := r.URL.Query().Get("all")
	if v == "" || v == "0" || v == "false" {
		return false, true
	}
	if !callerOf(r).Root() {
		writeError(w, http.StatusForbidden, &caller.Refusal{Err: &api.FieldError{Field: "all", Msg: "every caller's sessions are root's to see"}})
		return false, false
	}
	return true, true
}

// listAll is every session, oldest first.
func (r *sessions) listAll() []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*session, 0, len(r.byID))
	for _, s := range r.byID {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].created.Before(out[j].created) })
	return out
}

// lookAt is session id whoever owns it, for a look only (it is not used:
// its idle time goes on).
func (r *sessions) lookAt(id string) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.byID[id]; s != nil && !s.hasEnded() {
		return s
	}
	return nil
}

// handleSessionsAll answers root's all=1 list and look; false when r
// does not ask all=1 (the caller's own view then answers).
func (s *Server) handleSessionsAll(w http.ResponseWriter, r *http.Request, one bool) (handled bool) {
	all, ok := wantsAll(w, r)
	if !ok {
		return true
	}
	if !all {
		return false
	}
	if one {
		sess := s.sessions.lookAt(r.PathValue("id"))
		if sess == nil {
			sessionErr(w, errNoSession)
			return true
		}
		a := sess.answer(true)
		a.Owner = sess.owner
		s.answer(w, http.StatusOK, a)
		return true
	}
	want, ok := metadataFilter(w, r.URL.Query())
	if !ok {
		return true
	}
	list := []SessionAnswer{}
	for _, sess := range s.sessions.listAll() {
		if !sess.matches(want) {
			continue
		}
		a := sess.answer(false)
		a.Owner = sess.owner
		list = append(list, a)
	}
	s.answer(w, http.StatusOK, map[string][]SessionAnswer{"sessions": list})
	return true
}

package server

import (
	"errors"
	"net/http"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
)

// FileOpsBox is a session whose files can be made directories of and
// renamed (isolate.Session); a SessionBox without it answers 501.
type FileOpsBox interface {
	MakeDir(path string) (created bool, info isolate.FileInfo, err error)
	Rename(from, to string) (isolate.FileInfo, error)
}

// fileOpRequest is the body of POST /v1/sessions/{id}/files/{path}:
// {"op": "mkdir"} makes the directory path (and what is missing above
// it); {"op": "rename", "to": PATH} moves path to PATH in the box.
type fileOpRequest struct {
	Op string `json:"op"`
	To string `json:"to,omitempty"`
}

func (s *Server) handleSessionFileOp(w http.ResponseWriter, r *http.Request) {
	var req fileOpRequest
	leave, ok := read(s, w, r, &req)
	if !ok {
		return
	}
	defer leave()
	sess, done, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	defer done()
	box, ok := sess.box.(FileOpsBox)
	if !ok {
		writeError(w, http.StatusNotImplemented, errors.New("this service's sessions make no directories and rename nothing"))
		return
	}
	switch req.Op {
	case "mkdir":
		created, info, err := box.MakeDir(boxPath(r))
		if err != nil {
			fileErr(w, err)
			return
		}
		code := http.StatusOK
		if created {
			code = http.StatusCreated
		}
		s.answer(w, code, info)
	case "rename":
		if req.To == "" {
			writeError(w, http.StatusBadRequest, &api.FieldError{Field: "to", Msg: "required: the path to rename to"})
			return
		}
		info, err := box.Rename(boxPath(r), req.To)
		if err != nil {
			fileErr(w, err)
			return
		}
		s.answer(w, http.StatusOK, info)
	default:
		writeError(w, http.StatusBadRequest, &api.FieldError{Field: "op", Msg: `"mkdir" or "rename"`})
	}
}

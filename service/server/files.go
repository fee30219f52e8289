package server

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/isolate-sandbox/isolate/service/filestore"
)

// POST /v1/files: the body is the file; the answer its id, size and
// expiry. ?max_bytes=N refuses a larger body (413).
func (s *Server) handleFilePut(w http.ResponseWriter, r *http.Request) {
	var max int64
	if v := r.URL.Query().Get("max_bytes"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, errors.New("max_bytes: expected a non-negative integer"))
			return
		}
		max = n
	}
	body, clear := streamedBody(w, r)
	info, err := s.store.Put(callerOf(r).StoreOwner(), body, max)
	clear()
	var qe *filestore.QuotaError
	var te *filestore.TooLargeError
	switch {
	case errors.As(err, &qe):
		writeError(w, http.StatusInsufficientStorage, err)
	case errors.As(err, &te):
		writeError(w, http.StatusRequestEntityTooLarge, err)
	case err != nil:
		writeError(w, http.StatusInternalServerError, err)
	default:
		writeJSON(w, http.StatusCreated, info)
	}
}

// GET /v1/files/{id}: the file's bytes, to its owner or root (to anyone
// else, as if there were no such file).
func (s *Server) handleFileGet(w http.ResponseWriter, r *http.Request) {
	f, info, err := s.store.Open(r.PathValue("id"), callerOf(r).MayUseStore)
	if err != nil {
		writeStoreError(w, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	io.Copy(w, f)
}

// DELETE /v1/files/{id}.
func (s *Server) handleFileDelete(w http.ResponseWriter, r *http.Request) {
	if err := s.store.Delete(r.PathValue("id"), callerOf(r).MayUseStore); err != nil {
		writeStoreError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeStoreError(w http.ResponseWriter, err error) {
	if errors.Is(err, filestore.ErrNotFound) {
		writeError(w, http.StatusNotFound, err)
		return
	}
	writeError(w, http.StatusInternalServerError, err)
}

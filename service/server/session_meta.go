package server

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/isolate-sandbox/isolate/api"
)

// Metadata is what a caller attaches to a session at its creation
// ("metadata": {"conversation": "c-42"}), to find it again later
// (GET /v1/sessions?metadata.conversation=c-42): a few short strings,
// bounded so that a session's record stays small whatever is asked.
type Metadata map[string]string

// Bounds of a session's metadata.
const (
	maxMetadataKeys       = 16
	maxMetadataKeyBytes   = 64
	maxMetadataValueBytes = 512
)

// checkMetadata refuses metadata beyond its bounds, naming the field.
func checkMetadata(md Metadata) error {
	if len(md) > maxMetadataKeys {
		return &api.FieldError{Field: "metadata", Msg: fmt.Sprintf("%d keys: at most %d", len(md), maxMetadataKeys)}
	}
	for _, k := range sortedKeys(md) {
		if err := checkMetadataPair("metadata", k, md[k]); err != nil {
			return err
		}
	}
	return nil
}

// checkMetadataPair checks one key and its value; field is where they
// come from (the body's metadata, or the query's).
func checkMetadataPair(field, k, v string) error {
	if k == "" || len(k) > maxMetadataKeyBytes || !utf8.ValidString(k) {
		return &api.FieldError{Field: field, Msg: fmt.Sprintf("key %q: must be 1 to %d bytes of UTF-8", k, maxMetadataKeyBytes)}
	}
	if len(v) > maxMetadataValueBytes || !utf8.ValidString(v) {
		return &api.FieldError{Field: field + "." + k, Msg: fmt.Sprintf("%d bytes: at most %d bytes of UTF-8", len(v), maxMetadataValueBytes)}
	}
	return nil
}

func sortedKeys(md Metadata) []string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// metadataFilter is what a list request's query asks the sessions'
// metadata to hold (metadata.KEY=VALUE, each key once); false when the
// query is bad, and then the client has its answer.
func metadataFilter(w http.ResponseWriter, q url.Values) (Metadata, bool) {
	want := Metadata{}
	for name, values := range q {
		k, ok := strings.CutPrefix(name, "metadata.")
		if !ok {
			continue
		}
		err := checkMetadataPair("metadata", k, values[0])
		if err == nil && len(values) > 1 {
			err = &api.FieldError{Field: name, Msg: "given more than once"}
		}
		if err == nil && len(want) == maxMetadataKeys {
			err = &api.FieldError{Field: "metadata", Msg: fmt.Sprintf("more than %d keys", maxMetadataKeys)}
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return nil, false
		}
		want[k] = values[0]
	}
	return want, true
}

// matches tells whether s's metadata holds every key of want with its
// value.
func (s *session) matches(want Metadata) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range want {
		if got, ok := s.metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// setMetadata records md (checked) as s's metadata, and returns it.
func (s *session) setMetadata(md Metadata) Metadata {
	if len(md) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.metadata = md
	return md
}

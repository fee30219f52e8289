package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// A caller finds its sessions again by the metadata it gave them, from
// any client: GET /v1/sessions filters by metadata.KEY=VALUE, among the
// caller's own sessions only; GET /v1/sessions/{id} returns it.
func TestSessionMetadataFindsOwnSessionsFake(t *testing.T) {
	f := newSessionFake(t, func(c *Config) { c.MaxSessions, c.MaxSessionsPerCaller = 8, 4 })
	code, b := f.do(t, alice, "POST", "/v1/sessions", `{"metadata": {"conversation": "c-42", "user": "ann"}}`)
	created := decodeAs[SessionAnswer](t, b)
	if code != http.StatusCreated || created.Metadata["conversation"] != "c-42" || created.Metadata["user"] != "ann" {
		t.Fatalf("create: %d %s", code, b)
	}
	other := f.create(t, alice, `{"metadata": {"conversation": "c-43", "user": "ann"}}`)
	plain := f.create(t, alice, `{}`)
	// bob's session with the same metadata is not alice's to find.
	f.create(t, bob, `{"metadata": {"conversation": "c-42", "user": "ann"}}`)

	list := func(who string, query string) []string {
		t.Helper()
		caller := alice
		if who == "bob" {
			caller = bob
		}
		code, b := f.do(t, caller, "GET", "/v1/sessions"+query, "")
		if code != http.StatusOK {
			t.Fatalf("GET /v1/sessions%s: %d %s", query, code, b)
		}
		var ids []string
		for _, s := range decodeAs[struct{ Sessions []SessionAnswer }](t, b).Sessions {
			ids = append(ids, s.ID)
		}
		return ids
	}
	for query, want := range map[string][]string{
		"":                            {created.ID, other, plain},
		"?metadata.conversation=c-42": {created.ID},
		"?metadata.user=ann":          {created.ID, other},
		"?metadata.user=ann&metadata.conversation=c-43": {other},
		"?metadata.user=bob":                            nil,
		"?metadata.nokey=x":                             nil,
	} {
		// The fake's clock stands still: sessions made at one instant come
		// in any order.
		got := list("alice", query)
		slices.Sort(got)
		slices.Sort(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("alice, %q: %v, want %v", query, got, want)
		}
	}
	if got := list("bob", "?metadata.conversation=c-42"); len(got) != 1 || got[0] == created.ID {
		t.Errorf("bob sees %v, want only his own session", got)
	}

	// Root's view of every caller's sessions filters the same way.
	code, b = f.do(t, root, "GET", "/v1/sessions?all=1&metadata.conversation=c-42", "")
	if all := decodeAs[struct{ Sessions []SessionAnswer }](t, b).Sessions; code != http.StatusOK || len(all) != 2 {
		t.Errorf("root, all=1 and metadata: %d %s, want alice's and bob's c-42", code, b)
	}

	// The session's own view has its metadata, and processes even when
	// there are none.
	code, b = f.do(t, alice, "GET", "/v1/sessions/"+created.ID, "")
	var view map[string]json.RawMessage
	if err := json.Unmarshal(b, &view); code != http.StatusOK || err != nil {
		t.Fatalf("GET: %d %s", code, b)
	}
	if string(view["processes"]) != "[]" || !strings.Contains(string(view["metadata"]), `"conversation":"c-42"`) {
		t.Errorf("GET: %s, want metadata and an empty processes", b)
	}
	code, b = f.do(t, alice, "GET", "/v1/sessions/"+plain, "")
	if code != http.StatusOK || strings.Contains(string(b), `"metadata"`) {
		t.Errorf("GET of a session without metadata: %d %s", code, b)
	}
}

// Metadata beyond its bounds is a 400 naming the field, and makes no
// session; so is a bad filter.
func TestSessionMetadataBoundsFake(t *testing.T) {
	f := newSessionFake(t, nil)
	many := map[string]string{}
	for i := range 17 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	manyJSON, _ := json.Marshal(map[string]any{"metadata": many})
	for body, field := range map[string]string{
		string(manyJSON): "metadata",
		`{"metadata": {"` + strings.Repeat("k", 65) + `": "v"}}`:  "metadata",
		`{"metadata": {"": "v"}}`:                                 "metadata",
		`{"metadata": {"k": "` + strings.Repeat("v", 513) + `"}}`: "metadata.k",
		`{"metadata": {"k": 1}}`:                                  "metadata.k",
	} {
		code, b := f.do(t, alice, "POST", "/v1/sessions", body)
		var e errorBody
		json.Unmarshal(b, &e)
		if code != http.StatusBadRequest || e.Field != field {
			t.Errorf("%.80s: %d %s, want 400 naming %s", body, code, b, field)
		}
	}
	if n := f.sessions.count(); n != 0 {
		t.Errorf("%d sessions after refused creations, want 0", n)
	}
	// 512 bytes and 16 keys are within.
	ok := map[string]string{}
	for i := range 16 {
		ok[strings.Repeat("k", 64-i)] = strings.Repeat("v", 512)
	}
	okJSON, _ := json.Marshal(map[string]any{"metadata": ok})
	f.create(t, alice, string(okJSON))
	for _, query := range []string{"?metadata.=x", "?metadata.k=1&metadata.k=2", "?metadata." + strings.Repeat("k", 65) + "=x"} {
		code, b := f.do(t, alice, "GET", "/v1/sessions"+query, "")
		if code != http.StatusBadRequest {
			t.Errorf("GET /v1/sessions%s: %d %s, want 400", query, code, b)
		}
	}
}

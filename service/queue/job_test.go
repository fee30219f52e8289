package queue

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDecodeJob: what a job message may hold, and the one error naming
// what is wrong (the dead letter's reason).
func TestDecodeJob(t *testing.T) {
	for _, c := range []struct {
		name   string
		fields map[string]any
		want   Job
		err    string
	}{
		{"run by default", map[string]any{"id": "a1", "body": "{}"}, Job{ID: "a1", Endpoint: "run", Body: "{}"}, ""},
		{"exec", map[string]any{"id": "x:1.b_c-d", "endpoint": "exec", "body": "{}"}, Job{ID: "x:1.b_c-d", Endpoint: "exec", Body: "{}"}, ""},
		{"no id", map[string]any{"body": "{}"}, Job{}, "the job has no id"},
		{"id with a space", map[string]any{"id": "a b", "body": "{}"}, Job{}, `id of the job "a b"`},
		{"id too long", map[string]any{"id": strings.Repeat("a", 129), "body": "{}"}, Job{}, "129 bytes, at most 128"},
		{"unknown field", map[string]any{"id": "a", "body": "{}", "bodey": "{}"}, Job{}, `unknown field "bodey"`},
		{"unknown endpoint", map[string]any{"id": "a", "endpoint": "files", "body": "{}"}, Job{}, `endpoint "files"`},
		{"no body", map[string]any{"id": "a"}, Job{}, "the job has no body"},
		{"not a string", map[string]any{"id": 3, "body": "{}"}, Job{}, "field id of the job: want a string"},
		{"handed back", map[string]any{"id": "h", "body": "{}", "handed_back": "2", "lacking": "w0,w1", "attempts": "1"},
			Job{ID: "h", Endpoint: "run", Body: "{}", HandedBack: 2, Lacking: []string{"w0", "w1"}, Attempts: 1}, ""},
		{"bad count", map[string]any{"id": "h", "body": "{}", "handed_back": "-1"}, Job{}, "field handed_back of the job: want a count"},
	} {
		got, err := DecodeJob(c.fields)
		switch {
		case c.err == "" && (err != nil || !reflect.DeepEqual(got, c.want)):
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.err)
		}
	}
}

// TestJudge: an answer is stored; a refusal is stored and dead-lettered
// with the API's own message; a busy or stopping service leaves the job
// for another delivery.
func TestJudge(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   Outcome
		reason string
	}{
		{200, `{"results":[]}`, Store, ""},
		{500, `{"error":"box setup: no cgroup"}`, Store, ""},
		{400, `{"error":"commands[0].memory_bytes: above the cap","field":"commands[0].memory_bytes"}`, DeadLetter, "commands[0].memory_bytes: above the cap"},
		{403, `{"error":"commands[0].net: host: refused","field":"commands[0].net"}`, DeadLetter, "commands[0].net: host: refused"},
		{400, `not json`, DeadLetter, "HTTP 400"},
		{429, `{"error":"busy"}`, Retry, ""},
		{503, `{"error":"the service is stopping"}`, Retry, ""},
	} {
		got, reason := Judge(c.status, []byte(c.body))
		if got != c.want || reason != c.reason {
			t.Errorf("%d %s: %v %q, want %v %q", c.status, c.body, got, reason, c.want, c.reason)
		}
	}
}

// TestPoisoned: a job is poison once delivered more than the maximum.
func TestPoisoned(t *testing.T) {
	if p, _ := Poisoned(3, 3); p {
		t.Error("3 deliveries of at most 3: poisoned")
	}
	p, why := Poisoned(4, 3)
	if !p || !strings.Contains(why, "delivered 4 times without a result (at most 3)") {
		t.Errorf("4 deliveries of at most 3: %v %q", p, why)
	}
}

// TestAgeOf: the lag is the age of an entry by its id's clock.
func TestAgeOf(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	for _, c := range []struct {
		id   string
		want time.Duration
	}{
		{"1799999996500-0", 3500 * time.Millisecond},
		{"1800000000000-7", 0},
		{"1800000001000-0", 0}, // added by a clock ahead of the one read now
		{"not-an-id", 0},
	} {
		if got := AgeOf(c.id, now); got != c.want {
			t.Errorf("%s: %v, want %v", c.id, got, c.want)
		}
	}
}

// TestJobImages: the built images a job needs, from its body: an exec's
// language or image, each command's of a run; none for the host's tree,
// a path, or a body the API will refuse.
func TestJobImages(t *testing.T) {
	for _, c := range []struct {
		job  Job
		want []string
	}{
		{Job{Endpoint: "exec", Body: `{"lang":"python","source":"print(1)"}`}, []string{"python"}},
		{Job{Endpoint: "exec", Body: `{"lang":"no-such-lang","source":"print(1)"}`}, nil}, // unknown: the API refuses it
		{Job{Endpoint: "exec", Body: `{"lang":"cpp","image":"c","source":""}`}, []string{"c"}},
		{Job{Endpoint: "run", Body: `{"commands":[{"args":["x"]},{"args":["y"],"image":"java"},{"args":["z"],"lang":"java"},{"args":["w"],"image":"host"},{"args":["v"],"image":"/srv/tree"}]}`}, []string{"java"}},
		{Job{Endpoint: "run", Body: `{"commands":[{"args":["x"],"lang":"c"},{"args":["y"],"lang":"go"}]}`}, []string{"c", "go"}},
		{Job{Endpoint: "run", Body: `not json`}, nil},
	} {
		if got := c.job.Images(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %s: %v, want %v", c.job.Endpoint, c.job.Body, got, c.want)
		}
	}
}

// TestHasXX: a sandbox failure in an exec's or any run command's report.
func TestHasXX(t *testing.T) {
	for _, c := range []struct {
		endpoint, body string
		want           bool
	}{
		{"exec", `{"status":"XX","run":{"status":"XX"}}`, true},
		{"exec", `{"status":"OK"}`, false},
		{"run", `{"results":[{"status":"OK"},{"status":"XX"}]}`, true},
		{"run", `{"results":[{"status":"RE"}]}`, false},
		{"run", `{"error":"x"}`, false},
	} {
		if got := HasXX(c.endpoint, []byte(c.body)); got != c.want {
			t.Errorf("%s %s: %v", c.endpoint, c.body, got)
		}
	}
}

// Package queue is the service's queue front end: workers that take jobs
// from a Redis stream through a consumer group, hand each to the
// service's own /v1/run or /v1/exec handler in this process (as a caller
// of kind "queue": a TCP caller's rights), store the answer under the
// job's id with a time to live, announce it on a results stream, and
// acknowledge the job only then. A job is run at least once and has one
// result: a worker that dies leaves its jobs pending for the others to
// claim (XAUTOCLAIM), a job whose result exists is acknowledged without
// running again, and a job delivered too often, or one the API refuses,
// goes to a dead-letter stream with the reason (docs/QUEUE.md).
package queue

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/isolate-sandbox/isolate/langs"
)

// Job is one message of the jobs stream: the body of POST /v1/run or
// /v1/exec, and the id its result is stored under.
type Job struct {
	ID       string // the result's key is PREFIX:result:ID
	Endpoint string // "run" or "exec"
	Body     string // the request's JSON, as the endpoint takes it

	// What workers add when they hand a job back to the stream (a job
	// they cannot run: an image they lack, their own machinery failing),
	// as a new entry: how often it was handed back, by whom, and the
	// deliveries of its earlier entries that ended with no answer (they
	// count towards the dead letters' bound as the entry's own do).
	HandedBack int
	Lacking    []string
	Attempts   int64
}

// Fields are the stream entry's fields of job j.
func (j Job) Fields() []any {
	f := []any{"id", j.ID, "endpoint", j.Endpoint, "body", j.Body}
	if j.HandedBack > 0 {
		f = append(f, "handed_back", strconv.Itoa(j.HandedBack), "lacking", strings.Join(j.Lacking, ","),
			"attempts", strconv.FormatInt(j.Attempts, 10))
	}
	return f
}

// Path is the endpoint's HTTP path.
func (j Job) Path() string { return "/v1/" + j.Endpoint }

// maxIDBytes bounds a job id: it is part of a Redis key.
const maxIDBytes = 128

// DecodeJob reads a job from a stream message's fields: id (letters,
// digits and . _ : -, at most 128 bytes), body (JSON; the endpoint judges
// it) and endpoint ("run", the default, or "exec"). Any other field is an
// error: a misspelt one would otherwise be lost silently. A job whose id
// is bad has no result key; the error says what is wrong (the dead
// letter's reason).
func DecodeJob(fields map[string]any) (Job, error) {
	var j Job
	var unknown []string
	for k, v := range fields {
		s, ok := v.(string)
		if !ok {
			return Job{}, fmt.Errorf("field %s of the job: want a string", k)
		}
		switch k {
		case "id":
			j.ID = s
		case "endpoint":
			j.Endpoint = s
		case "body":
			j.Body = s
		case "handed_back", "attempts":
			n, err := strconv.ParseInt(s, 10, 32)
			if err != nil || n < 0 {
				return Job{}, fmt.Errorf("field %s of the job: want a count, got %q", k, s)
			}
			if k == "attempts" {
				j.Attempts = n
			} else {
				j.HandedBack = int(n)
			}
		case "lacking":
			if s != "" {
				j.Lacking = strings.Split(s, ",")
			}
		default:
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return j, fmt.Errorf("unknown field %q of the job (a job has id, body and endpoint; workers add handed_back, lacking and attempts)", unknown[0])
	}
	if err := checkID(j.ID); err != nil {
		return j, err
	}
	switch j.Endpoint {
	case "":
		j.Endpoint = "run"
	case "run", "exec":
	default:
		return j, fmt.Errorf("endpoint %q of the job: want run or exec", j.Endpoint)
	}
	if j.Body == "" {
		return j, fmt.Errorf("the job has no body (the JSON of POST /v1/%s)", j.Endpoint)
	}
	return j, nil
}

// checkID tells whether id may name a result.
func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("the job has no id")
	}
	if len(id) > maxIDBytes {
		return fmt.Errorf("id of the job: %d bytes, at most %d", len(id), maxIDBytes)
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return fmt.Errorf("id of the job %q: only letters, digits and . _ : - may name a result", id)
		}
	}
	return nil
}

// Outcome is what a worker does with an answer.
type Outcome int

const (
	// Store the answer as the job's result.
	Store Outcome = iota
	// DeadLetter stores the answer and dead-letters the job: the API
	// refused it (a 4xx answer), so no delivery will ever run it.
	DeadLetter
	// Retry hands the job back to the stream, unanswered: the service was
	// stopping (503), and another worker will run it (a worker retries a
	// 429 itself before it gets here, unless it is stopping too).
	Retry
)

// Judge is what becomes of a job the endpoint answered with status and
// body, and the dead letter's reason: the API's own error message.
func Judge(status int, body []byte) (Outcome, string) {
	switch {
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		return Retry, ""
	case status >= 400 && status < 500:
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			return DeadLetter, fmt.Sprintf("HTTP %d", status)
		}
		return DeadLetter, e.Error
	}
	return Store, ""
}

// Poisoned tells whether a job delivered deliveries times (its entries'
// in all, Job.Attempts included) is past
// maxDeliveries, and why: every worker that took it stopped before it
// answered.
func Poisoned(deliveries int64, maxDeliveries int) (bool, string) {
	if deliveries <= int64(maxDeliveries) {
		return false, ""
	}
	return true, fmt.Sprintf("delivered %d times without a result (at most %d): every worker that took it stopped before answering", deliveries, maxDeliveries)
}

// imageOf is the built image a spec's image and lang fields name: ""
// for none (the host's tree, a path, or a language the API will refuse).
func imageOf(image, lang string) string {
	if image == "" && lang != "" {
		l, err := langs.Find(lang)
		if err != nil {
			return ""
		}
		image = l.Image
	}
	if image == "host" || strings.Contains(image, "/") {
		return ""
	}
	return image
}

// Images are the built images job j needs (its exec's, or its run's
// commands'), as far as its body says: a body the API will refuse needs
// none.
func (j Job) Images() []string {
	type spec struct {
		Image string `json:"image"`
		Lang  string `json:"lang"`
	}
	var specs []spec
	if j.Endpoint == "exec" {
		var s spec
		if json.Unmarshal([]byte(j.Body), &s) != nil {
			return nil
		}
		specs = append(specs, s)
	} else {
		var r struct {
			Commands []spec `json:"commands"`
		}
		if json.Unmarshal([]byte(j.Body), &r) != nil {
			return nil
		}
		specs = r.Commands
	}
	var out []string
	for _, s := range specs {
		if img := imageOf(s.Image, s.Lang); img != "" && !slices.Contains(out, img) {
			out = append(out, img)
		}
	}
	return out
}

// HasXX tells whether an endpoint's 200 answer reports a sandbox
// failure (status XX) of any of its commands.
func HasXX(endpoint string, body []byte) bool {
	if endpoint == "exec" {
		var r struct {
			Status string `json:"status"`
		}
		return json.Unmarshal(body, &r) == nil && r.Status == "XX"
	}
	var r struct {
		Results []struct {
			Status string `json:"status"`
		} `json:"results"`
	}
	if json.Unmarshal(body, &r) != nil {
		return false
	}
	for _, c := range r.Results {
		if c.Status == "XX" {
			return true
		}
	}
	return false
}

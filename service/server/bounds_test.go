package server

// The service's own resources: what a request may make it hold, and what
// clients that connect and never speak, or never read, may take.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/internal/connlimit"
	"github.com/isolate-sandbox/isolate/internal/fdtest"
	"github.com/isolate-sandbox/isolate/internal/jsonout"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/service/caller"
)

// A body past the limit is refused before it is read: 413, naming the
// limit, whether its length is announced or not.
func TestBodyPastTheLimitIs413(t *testing.T) {
	s := startService(t, func(c *Config) { c.MaxBodyBytes = 1 << 20 })
	big := `{"commands":[{"args":["/bin/true"],"env":["X=` + strings.Repeat("x", 2<<20) + `"]}]}`
	for _, announced := range []bool{true, false} {
		var body io.Reader = strings.NewReader(big)
		if !announced {
			body = io.MultiReader(body) // no length: sent chunked
		}
		req, _ := http.NewRequest("POST", "http://isolate/v1/run", body)
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "1048576 bytes") {
			t.Errorf("announced %v: %d %s, want 413 naming the limit", announced, resp.StatusCode, b)
		}
	}
}

// An array past its bound is refused while the body is read, naming the
// array: a body of "{}," never becomes a million structs.
func TestArrayPastItsBoundNamesTheField(t *testing.T) {
	s := startService(t, nil)
	for _, tc := range []struct{ body, field string }{
		{`{"commands":[{"args":["/bin/true"],"copy_in":[` + strings.TrimSuffix(strings.Repeat(`{},`, 100000), ",") + `]}]}`, "commands[0].copy_in"},
		{`{"commands":[{"args":["/bin/true"],"binds":[` + strings.TrimSuffix(strings.Repeat(`{},`, 300), ",") + `]}]}`, "commands[0].binds"},
		{`{"commands":[` + strings.TrimSuffix(strings.Repeat(`{},`, 10000), ",") + `]}`, "commands"},
		{`{"commands":[{"args":[` + strings.TrimSuffix(strings.Repeat(`"",`, 5000), ",") + `]}]}`, "commands[0].args"},
	} {
		code, b := s.do(t, "POST", "/v1/run", tc.body)
		var e errorBody
		json.Unmarshal(b, &e)
		if code != http.StatusBadRequest || e.Field != tc.field || !strings.Contains(e.Error, "more than") {
			t.Errorf("%.60s...: %d %s, want 400 naming %s", tc.body, code, b, tc.field)
		}
	}
}

// Output past the limit is cut and said so; no request makes the
// service keep a stream unbounded.
func TestOutputPastTheLimitIsCut(t *testing.T) {
	s := startService(t, nil)
	resp := s.run(t, `{"commands":[{"args":["/bin/sh","-c","head -c 50000000 /dev/zero"],"output_limit_bytes":1048576}]}`)
	if r := resp.Results[0]; len(r.Stdout) != 1<<20 || !r.StdoutTruncated {
		t.Errorf("stdout of %d bytes, truncated %v: want 1 MiB, truncated", len(r.Stdout), r.StdoutTruncated)
	}
	for _, tc := range []struct{ body, field string }{
		{`{"commands":[{"args":["/bin/true"],"output_limit_bytes":-1}]}`, "commands[0].output_limit_bytes"},
		{`{"commands":[{"args":["/bin/true"],"output_limit_bytes":1099511627776}]}`, "commands[0].output_limit_bytes"},
		{`{"commands":[{"args":["/bin/true"],"stdout":{"collect":{"max_bytes":1099511627776}}}]}`, "commands[0].stdout.collect.max_bytes"},
	} {
		code, b := s.do(t, "POST", "/v1/run", tc.body)
		var e errorBody
		json.Unmarshal(b, &e)
		if code != http.StatusBadRequest || e.Field != tc.field {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.body, code, b, tc.field)
		}
	}
}

// An answer with large strings is the JSON encoding/json would write,
// though it is written in pieces.
func TestLargeAnswerIsEncodedAsEncodingJSONWould(t *testing.T) {
	var raw strings.Builder
	for i := 0; raw.Len() < 3*jsonout.LiftAbove; i++ {
		raw.WriteString(string(rune(i % 0x3000)))
		raw.WriteByte(byte(i)) // control bytes, and invalid UTF-8
		raw.WriteString("<&>\u2028é")
	}
	rep := &api.Report{Stdout: raw.String(), Stderr: "small"}
	text := raw.String()
	resp := &RunResponse{Results: []Result{{Report: rep, CopyOut: []CopyOutResult{{Path: "/box/a", Text: &text, Base64: []byte(raw.String())}}}},
		Pipes: []PipeRecording{{Data: raw.String()}}}
	want, _ := json.Marshal(resp)
	a, err := encodeAnswer(resp)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	if err := a.Write(&got); err != nil {
		t.Fatal(err)
	}
	if a.Size() != -1 || a.Lifted() != 4 {
		t.Errorf("%d strings written in pieces, want 4", a.Lifted())
	}
	var w, g any
	json.Unmarshal(want, &w)
	if err := json.Unmarshal([]byte(got.String()), &g); err != nil {
		t.Fatal(err)
	}
	if mustJSON(w) != mustJSON(g) || rep.Stdout != raw.String() {
		t.Error("the answer written in pieces differs from encoding/json's (or the report was changed)")
	}
}

// Two streaming clients that never read do not hold the service's slots:
// past the write timeout their runs end and the slots are freed.
func TestClientsThatNeverReadFreeTheirSlots(t *testing.T) {
	s := startService(t, func(c *Config) { c.Parallel, c.WriteTimeout = 2, time.Second })
	body := `{"commands":[{"args":["/usr/bin/yes"],"wall_time_ms":600000}]}`
	for range 2 {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/run HTTP/1.1\r\nHost: isolate\r\nAccept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	fdtest.WaitFor(t, "both streams to run", func() bool { return s.running() == 2 })
	fdtest.WaitFor(t, "the slots of the clients that never read to be freed", func() bool { return s.running() == 0 })
	if r := s.run(t, `{"commands":[{"args":["/bin/true"]}]}`).Results[0]; r.Status != api.StatusOK {
		t.Fatalf("the next run: %s", r.Status)
	}
}

// A client that never reads its answer holds no run slot once its run
// ended, streamed or not: its answer waits in the service (a streamed
// one's chunks held in its caller's budget), and with --parallel 1
// --queue 0 the next request runs at once instead of getting 429 until
// the write timeout.
func TestClientsThatNeverReadHoldNoSlotOnceTheirRunEnded(t *testing.T) {
	s := startService(t, func(c *Config) { c.Parallel, c.Queue, c.WriteTimeout = 1, 0, 10*time.Minute })
	// (The sleep leaves the run in its slot long enough to be seen there.)
	run := func(size string) string {
		return mustJSON(RunRequest{Commands: []Command{{Spec: api.Spec{Args: []string{"/bin/sh", "-c", "head -c " + size + " /dev/zero; sleep 1"}, OutputLimitBytes: 1 << 20}}}})
	}
	for _, stalled := range []struct{ name, accept, body string }{
		{"a streamed answer", ndjson, run("4M")},
		{"a whole answer", "application/json", run("8M")},
	} {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/run HTTP/1.1\r\nHost: isolate\r\nAccept: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", stalled.accept, len(stalled.body), stalled.body)
		fdtest.WaitFor(t, stalled.name+": its run to take the slot", func() bool { return s.running() == 1 })
		fdtest.WaitFor(t, stalled.name+": its slot to be given back once its run ended", func() bool { return s.running() == 0 })
		if r := s.run(t, `{"commands":[{"args":["/bin/true"]}]}`).Results[0]; r.Status != api.StatusOK {
			t.Fatalf("%s: the next run: %s", stalled.name, r.Status)
		}
	}
}

// streamZeros posts a streamed run of `head -c size /dev/zero` (output
// limit 1 MiB) to a service whose callers' budget is 4 MiB; each reads
// its events, calling on with each.
func streamZeros(t *testing.T, size string) (s *service, each func(on func(Event))) {
	s = startService(t, func(c *Config) { c.Ledger = caller.NewLedger(caller.Budget{Bytes: 4 << 20, TotalBytes: 64 << 20}) })
	body := mustJSON(RunRequest{Commands: []Command{{Spec: api.Spec{Args: []string{"/usr/bin/head", "-c", size, "/dev/zero"}, OutputLimitBytes: 1 << 20}}}})
	req, err := http.NewRequest("POST", "http://isolate/v1/run", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", ndjson)
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return s, func(on func(Event)) {
		dec := json.NewDecoder(resp.Body)
		for {
			var ev Event
			if err := dec.Decode(&ev); err == io.EOF {
				return
			} else if err != nil {
				t.Fatal(err)
			}
			on(ev)
		}
	}
}

// A streamed answer's live copy is cut where the client falls behind by
// more than its caller's budget and reads nothing: a {"cut": true} line
// says so, the run goes on, and its result has the output as captured.
func TestStreamPastTheCallersBudgetIsCutNotBlocked(t *testing.T) {
	s, each := streamZeros(t, "64M")
	// Read nothing until the run ended: its slot is free then.
	fdtest.WaitFor(t, "the run to end while its client reads nothing", func() bool { return s.running() == 0 })
	var cut bool
	var result *Result
	each(func(ev Event) {
		cut = cut || ev.Cut && ev.Stream == "stdout"
		if ev.Result != nil {
			result = ev.Result
		}
	})
	if !cut {
		t.Error("no {\"cut\": true} line for stdout")
	}
	if result == nil || result.Status != api.StatusOK || len(result.Stdout) != 1<<20 {
		t.Fatalf("the result: %+v", result)
	}
	if u := s.Ledger().Usage("uid:0"); u.Bytes != 0 {
		t.Errorf("the ledger holds %d bytes for the caller after its answer", u.Bytes)
	}
}

// A client that reads its stream gets all of it, however far the
// program's output passes its caller's budget: the program waits for
// the client rather than its live copy being cut.
func TestStreamReadOnIsNeverCut(t *testing.T) {
	_, each := streamZeros(t, "32M")
	streamed, cut := 0, false
	each(func(ev Event) {
		cut = cut || ev.Cut
		if !cut {
			streamed += len(ev.Data)
		}
	})
	if cut || streamed != 32<<20 {
		t.Errorf("%d bytes streamed, cut %v: want 32 MiB, never cut though the client read on", streamed, cut)
	}
}

// One uid's idle connections past its share are closed as they come,
// and the service still answers others.
func TestOneUIDsIdleConnectionsAreBounded(t *testing.T) {
	s := startService(t, func(c *Config) { c.Conns = connlimit.Limits{PerPeer: 8} })
	fdtest.Flood(t, s.sock, 200, nil)
	fdtest.WaitFor(t, "the flooder's connections past its share to be closed", func() bool {
		_, refused, _ := s.Connections()
		return refused >= 200-8
	})
	if code, b := s.do(t, "GET", "/v1/version", ""); code != http.StatusOK {
		t.Fatalf("GET /v1/version: %d %s", code, b)
	}
}

// With no descriptor left the service's accept loop waits; it answers
// once descriptors are free again. The service runs nothing here (no
// runner): only its accept loop is at stake, and boxes being built
// would fail for want of descriptors too.
func TestAcceptSurvivesRunningOutOfDescriptors(t *testing.T) {
	dir := t.TempDir()
	srv := New(Config{Runner: noRunner{}, Version: "test"})
	sock := dir + "/api.sock"
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	defer func() {
		srv.Shutdown(time.Second)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	fdtest.StarveAccept(t, sock, func() int64 {
		_, _, starved := srv.Connections()
		return starved
	})
	resp, err := unixClient(sock).Get("http://isolate/v1/version")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/version: %d", resp.StatusCode)
	}
}

// noRunner runs nothing: for tests of the transport alone.
type noRunner struct{}

func (noRunner) Run(context.Context, *api.Spec, isolate.IO) (*api.Report, error) {
	return nil, errors.New("this service runs nothing")
}

func (noRunner) Ready() int { return 0 }

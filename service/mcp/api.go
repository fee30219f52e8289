package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
)

// API sends one request of the service's HTTP API and returns its
// answer, whose body streams: the tools read NDJSON answers line by line.
type API interface {
	Do(ctx context.Context, method, path string, body io.Reader, header http.Header) (*http.Response, error)
}

// APIError is an answer of the API that is not a success: its status and
// the service's error, with the request field at fault when it names one.
type APIError struct {
	Status  int
	Message string
	Field   string
}

func (e *APIError) Error() string { return e.Message }

// SocketAPI is the API of a service at a unix socket.
func SocketAPI(socket string) API {
	return &clientAPI{client: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 4,
	}}}
}

type clientAPI struct{ client *http.Client }

func (c *clientAPI) Do(ctx context.Context, method, path string, body io.Reader, header http.Header) (*http.Response, error) {
	r, err := http.NewRequestWithContext(ctx, method, "http://isolate"+path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		r.Header[k] = v
	}
	return c.client.Do(r)
}

// HandlerAPI is the API of handler h called in this process (h answers
// as the caller it speaks for). The answer streams through a pipe as the
// handler writes it.
func HandlerAPI(h http.Handler) API { return handlerAPI{h: h} }

type handlerAPI struct{ h http.Handler }

func (a handlerAPI) Do(ctx context.Context, method, path string, body io.Reader, header http.Header) (*http.Response, error) {
	if body == nil {
		body = http.NoBody
	}
	r, err := http.NewRequestWithContext(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		r.Header[k] = v
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			w.writeHeader(http.StatusOK)
			pw.Close()
		}()
		a.h.ServeHTTP(w, r)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
	}
	return &http.Response{StatusCode: w.code, Header: w.header, Body: pr}, nil
}

// pipeWriter is the response writer of HandlerAPI: the status and
// headers once written, the body into a pipe the caller reads.
type pipeWriter struct {
	header http.Header
	code   int
	once   sync.Once
	ready  chan struct{}
	pw     *io.PipeWriter
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) { w.writeHeader(code) }

func (w *pipeWriter) writeHeader(code int) {
	w.once.Do(func() {
		w.code = code
		w.header = w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.writeHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush: every write already reaches the reader.
func (w *pipeWriter) Flush() {}

// maxAnswer bounds an answer the tools read whole (a report, a listing):
// the service bounds what it sends; this bounds what a tool holds.
const maxAnswer = 8 << 20

// call sends a JSON request (nil: no body) and decodes a JSON answer into
// out (nil: none expected). A status of 400 and above is an *APIError.
func call(ctx context.Context, a API, method, path string, in, out any) error {
	var body io.Reader
	header := http.Header{}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
		header.Set("Content-Type", "application/json")
	}
	resp, err := a.Do(ctx, method, path, body, header)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := failure(resp); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(out)
}

// failure is the *APIError of an answer with a status of 400 or above.
func failure(resp *http.Response) error {
	if resp.StatusCode < 400 {
		return nil
	}
	var e struct {
		Error string `json:"error"`
		Field string `json:"field"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(b))
		if e.Error == "" {
			e.Error = http.StatusText(resp.StatusCode)
		}
	}
	return &APIError{Status: resp.StatusCode, Message: e.Error, Field: e.Field}
}

// stream sends a JSON request asking for an NDJSON answer and calls each
// for every line, decoded into a fresh T.
func stream[T any](ctx context.Context, a API, path string, in any, each func(*T) error) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	header := http.Header{}
	header.Set("Content-Type", "application/json")
	header.Set("Accept", "application/x-ndjson")
	resp, err := a.Do(ctx, http.MethodPost, path, bytes.NewReader(b), header)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := failure(resp); err != nil {
		return err
	}
	sc := bufio.NewScanner(resp.Body)
	// An output chunk is at most the service's read buffer (64 KiB),
	// JSON-escaped; a report at most what the service caps.
	sc.Buffer(make([]byte, 64<<10), maxAnswer)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return fmt.Errorf("the service's answer: %w", err)
		}
		if err := each(&v); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("the service's answer: %w", err)
	}
	return nil
}

// errNoAnswer is a stream that ended without its last line.
var errNoAnswer = errors.New("the service's answer ended early")

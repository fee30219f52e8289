package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the service's Prometheus metrics, in a registry of its own
// (no process-global state, so tests can run several services).
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "isolate_requests_total", Help: "Requests answered, by endpoint and HTTP status.",
	}, []string{"endpoint", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "isolate_request_duration_seconds", Help: "Time from a request's arrival to its answer, by endpoint.",
		// From well below a millisecond (a ready box running /bin/true)
		// to a minute (a run at the default wall limit).
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
	}, []string{"endpoint"})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	m.reg.MustRegister(s.cfg.Metrics...)
	m.reg.MustRegister(m.requests, m.latency, newUsageCollector(s.audit),
		gauge("isolate_queue_length", "Requests waiting for a slot.", func() float64 {
			_, w := s.queue.lengths()
			return float64(w)
		}),
		gauge("isolate_running_commands", "Commands running now.", func() float64 {
			r, _ := s.queue.lengths()
			return float64(r)
		}),
		gauge("isolate_pool_ready_boxes", "Boxes built ahead and waiting for a command.", func() float64 {
			return float64(s.runner.Ready())
		}),
		gauge("isolate_filestore_bytes", "Bytes held by the file store.", func() float64 {
			b, _ := s.store.Usage()
			return float64(b)
		}),
		gauge("isolate_filestore_files", "Files held by the file store.", func() float64 {
			_, n := s.store.Usage()
			return float64(n)
		}),
		gauge("isolate_filestore_quota_bytes", "The file store's quota.", func() float64 {
			return float64(s.store.Quota())
		}),
		gauge("isolate_connections", "Connections the service holds now.", func() float64 {
			h, _, _ := s.Connections()
			return float64(h)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "isolate_connections_refused_total", Help: "Connections closed as they came, beyond the limits in all or per uid.",
		}, func() float64 {
			_, r, _ := s.Connections()
			return float64(r)
		}),
		gauge("isolate_sessions", "Sessions alive now.", func() float64 {
			if s.sessions == nil {
				return 0
			}
			return float64(s.sessions.count())
		}),
		prometheus.NewGoCollector(),
		prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// statusRecorder remembers the status a handler answered with.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush passes streaming's flushes through.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// FlushError is Flush with its error, for http.ResponseController.
func (r *statusRecorder) FlushError() error {
	return http.NewResponseController(r.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// observe counts and times each request of endpoint.
func (m *metrics) observe(endpoint string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next(rec, r)
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		m.requests.WithLabelValues(endpoint, strconv.Itoa(rec.code)).Inc()
		m.latency.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
	}
}

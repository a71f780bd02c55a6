package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RouteUnmatched is the route label of requests that matched no route (404s of unknown paths),
// so that scanners probing random paths cannot blow up the label set.
const RouteUnmatched = "unmatched"

// HTTP are the request metrics of an HTTP API, labelled by route template (e.g.
// "/jobs/:id"), never by raw path.
type HTTP struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewHTTP returns unregistered HTTP metrics (NewRegistry registers one set).
func NewHTTP() *HTTP {
	return &HTTP{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "http_requests_total",
			Help:      "HTTP requests answered, by route template and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "http_request_duration_seconds",
			Help:      "Time to answer an HTTP request, by route template (an SSE feed counts until it closes).",
			Buckets:   prometheus.DefBuckets,
		}, []string{"route"}),
	}
}

// InitRoutes pre-creates the series of every route: its duration histogram and its count of
// 200 answers, at 0.
func (h *HTTP) InitRoutes(routes []string) {
	for _, r := range append(routes, RouteUnmatched) {
		h.duration.WithLabelValues(r)
		h.requests.WithLabelValues(r, "200")
	}
}

// Observe records one answered request.
func (h *HTTP) Observe(route string, code int, took time.Duration) {
	if route == "" {
		route = RouteUnmatched
	}
	h.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	h.duration.WithLabelValues(route).Observe(took.Seconds())
}

// Describe implements prometheus.Collector.
func (h *HTTP) Describe(ch chan<- *prometheus.Desc) {
	h.requests.Describe(ch)
	h.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (h *HTTP) Collect(ch chan<- prometheus.Metric) {
	h.requests.Collect(ch)
	h.duration.Collect(ch)
}

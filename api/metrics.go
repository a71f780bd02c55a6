package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/metrics"
)

// RouteUnmatched is the route label of requests that matched no route (404s of unknown paths),
// so that scanners probing random paths cannot blow up the label set.
const RouteUnmatched = "unmatched"

// Metrics are the request metrics of the API, labelled by route template (e.g. "/jobs/:id"),
// never by raw path. New registers them on the registry it serves.
type Metrics struct {
	metrics.Set
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics returns unregistered request metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		requests: metrics.NewCounterVec("http_requests_total",
			"HTTP requests answered, by route template and status code.", "route", "code"),
		duration: metrics.NewHistogramVec("http_request_duration_seconds",
			"Time to answer an HTTP request, by route template (an SSE feed counts until it closes).",
			prometheus.DefBuckets, "route"),
	}
	m.Set = metrics.Set{m.requests, m.duration}
	return m
}

// InitRoutes pre-creates the series of every route: its duration histogram and its count of
// 200 answers, at 0.
func (m *Metrics) InitRoutes(routes []string) {
	for _, r := range append(routes, RouteUnmatched) {
		m.duration.WithLabelValues(r)
		m.requests.WithLabelValues(r, "200")
	}
}

// Observe records one answered request.
func (m *Metrics) Observe(route string, code int, took time.Duration) {
	if route == "" {
		route = RouteUnmatched
	}
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route).Observe(took.Seconds())
}

// mustRegisterMetrics registers the request metrics on reg, or returns those a server
// registered there before (servers that share a registry count together). Like MustRegister,
// it panics when other families hold the names.
func mustRegisterMetrics(reg prometheus.Registerer) *Metrics {
	m := NewMetrics()
	err := reg.Register(m)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(*Metrics); ok {
			return existing
		}
	}
	if err != nil {
		panic(err)
	}
	return m
}

// observe is the middleware that records every answered request in the HTTP metrics, by route
// template (c.FullPath, "unmatched" for unknown paths) and status code. It runs outside the
// panic recovery, so a recovered panic counts as the 500 it was answered with.
func (s *Server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	s.requests.Observe(c.FullPath(), c.Writer.Status(), time.Since(start))
}

// serveMetrics handles GET /metrics: the Prometheus exposition of the server's registry. It
// shows counts and depths, never payloads, but its labels name agents, job types and nodes.
// With metrics_token set it wants "Authorization: Bearer <metrics_token>" (how Prometheus's
// scrape config sends credentials) or an admin token; without, it is open, as it always was,
// and a server that has API tokens says so in its log at start.
func (s *Server) serveMetrics() gin.HandlerFunc {
	h := gin.WrapH(s.metrics.Handler())
	want := ""
	if s.cfg != nil {
		want = s.cfg.MetricsToken
	}
	if want == "" {
		if s.tokens.Load().Len() > 0 {
			s.log.Warn("GET /metrics is open to anyone who reaches the API: its labels name agents; " +
				"set metrics_token (ORCH_METRICS_TOKEN) to require a bearer token")
		}
		return h
	}
	// Compared as hashes: constant time, and the same length whatever was sent.
	wantSum := sha256.Sum256([]byte(want))
	return func(c *gin.Context) {
		if token, ok := bearerToken(c.GetHeader("Authorization")); ok {
			sum := sha256.Sum256([]byte(token))
			if subtle.ConstantTimeCompare(sum[:], wantSum[:]) == 1 {
				h(c)
				return
			}
		}
		id, err := s.authenticate(c)
		switch {
		case err != nil:
			c.Header("WWW-Authenticate", `Bearer realm="metrics"`)
			s.writeError(c, unauthorized("GET /metrics needs \"Authorization: Bearer <metrics_token>\" or an admin token"))
		case id.Role != RoleAdmin:
			s.writeError(c, forbidden("a token of role %s may not read GET /metrics: send the metrics token or an admin token", id.Role))
		default:
			h(c)
		}
	}
}

// initRouteMetrics pre-creates the HTTP series of every registered route at 0.
func (s *Server) initRouteMetrics(r *gin.Engine) {
	routes := make([]string, 0, len(r.Routes()))
	seen := map[string]bool{}
	for _, ri := range r.Routes() {
		if !seen[ri.Path] {
			seen[ri.Path] = true
			routes = append(routes, ri.Path)
		}
	}
	s.requests.InitRoutes(routes)
}

// metricsOf returns the registry of opts, or a private one that serves the request and process
// metrics only.
func metricsOf(opts Options) *metrics.Registry {
	if opts.Metrics != nil {
		return opts.Metrics
	}
	return metrics.NewRegistry(opts.Logger)
}

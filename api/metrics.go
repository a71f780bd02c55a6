package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/metrics"
)

// observe is the middleware that records every answered request in the HTTP metrics, by route
// template (c.FullPath, "unmatched" for unknown paths) and status code. It runs outside the
// panic recovery, so a recovered panic counts as the 500 it was answered with.
func (s *Server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	s.metrics.HTTP.Observe(c.FullPath(), c.Writer.Status(), time.Since(start))
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
	s.metrics.HTTP.InitRoutes(routes)
}

// metricsOf returns the registry of opts, or a private one that serves the HTTP and process
// metrics only.
func metricsOf(opts Options) *metrics.Registry {
	if opts.Metrics != nil {
		return opts.Metrics
	}
	return metrics.NewRegistry(opts.Logger)
}

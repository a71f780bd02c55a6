package api

import (
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

// serveMetrics handles GET /metrics: the Prometheus exposition of the server's registry. It is
// not authenticated, as Prometheus scrapes it; it shows counts and depths, never payloads.
func (s *Server) serveMetrics() gin.HandlerFunc {
	return gin.WrapH(s.metrics.Handler())
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

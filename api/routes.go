package api

import (
	"sort"
)

// Route is one route of the API: an HTTP method and its path template in the router's syntax
// ("/jobs/:id").
type Route struct {
	Method string
	Path   string
}

// Routes lists every route the server answers, sorted by path then method. The test that keeps
// docs/openapi.yaml in step with the router reads it; tools may too.
func (s *Server) Routes() []Route {
	infos := s.handler.Routes()
	out := make([]Route, 0, len(infos))
	for _, ri := range infos {
		out = append(out, Route{Method: ri.Method, Path: ri.Path})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Method < out[j].Method
	})
	return out
}

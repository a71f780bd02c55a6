package api

import "github.com/gpuorch/orchestrator/internal/ident"

// badID is the 400 of an id in field that p refuses; the message says p's rule.
func badID(field string, p ident.Pattern) *Error {
	return badRequest(field, "must be %s", p.Rule())
}

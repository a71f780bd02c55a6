package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/wire"
)

// Error codes of wire.ErrorDetail.Code.
const (
	CodeInvalidRequest   = "invalid_request"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeJobTerminal      = "job_terminal"
	CodePayloadTooLarge  = "payload_too_large"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"

	CodeIdempotencyMismatch = "idempotency_mismatch" // a resubmitted job_id with another request (409)
	CodeUnsatisfiable       = "unsatisfiable"        // no node of the cluster could ever run the job (422)
)

// Error is an error answer decided by the API layer itself (bad input, auth). Handlers return it
// like any other error; writeError sends it as is.
type Error struct {
	Status  int
	Code    string
	Message string
	Field   string // the offending input field of a 400
}

// Error implements error.
func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	return e.Code + ": " + e.Message
}

// badRequest is a 400 naming the offending field.
func badRequest(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Field: field, Message: fmt.Sprintf(format, args...)}
}

// forbidden is a 403.
func forbidden(format string, args ...any) *Error {
	return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: fmt.Sprintf(format, args...)}
}

// notFound is a 404.
func notFound(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

// methodNotAllowed is the 405 of a request whose path exists for other methods only; the
// Allow header is the caller's to set (gin sets it for the routes it knows).
func methodNotAllowed(c *gin.Context) *Error {
	return &Error{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed,
		Message: fmt.Sprintf("method %s is not allowed on %s", c.Request.Method, c.Request.URL.Path)}
}

// ErrorStatus maps an error to its HTTP status and error code. It is the only place that decides
// how an internal error looks to a client.
func ErrorStatus(err error) (status int, code string) {
	var (
		apiErr   *Error
		valErr   *engine.ValidationError
		unsat    *engine.UnsatisfiableError
		maxBytes *http.MaxBytesError
	)
	switch {
	case err == nil:
		return http.StatusOK, ""
	case errors.As(err, &apiErr):
		return apiErr.Status, apiErr.Code
	case errors.As(err, &valErr):
		return http.StatusBadRequest, CodeInvalidRequest
	case errors.As(err, &unsat):
		return http.StatusUnprocessableEntity, CodeUnsatisfiable
	case errors.As(err, &maxBytes):
		return http.StatusRequestEntityTooLarge, CodePayloadTooLarge
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, engine.ErrJobTerminal):
		return http.StatusConflict, CodeJobTerminal
	case errors.Is(err, store.ErrConflict):
		return http.StatusConflict, CodeConflict
	case isUnavailable(err):
		return http.StatusServiceUnavailable, CodeUnavailable
	}
	return http.StatusInternalServerError, CodeInternal
}

// isUnavailable reports whether err says a dependency cannot serve now: the store's and the
// streams' sentinels, which their drivers mark (the API classifies no driver's errors), and
// the request's own context ending, whichever layer was waiting when it did (the client went
// away or its deadline passed; a 503 is logged at debug then, see logError).
func isUnavailable(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, streams.ErrUnavailable) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// errorBody builds the JSON answer of err. Messages of 5xx answers are generic: the details
// (addresses, SQL) go to the log, not to the client.
func errorBody(err error, status int, code string) wire.ErrorBody {
	d := wire.ErrorDetail{Code: code}
	var (
		apiErr *Error
		valErr *engine.ValidationError
		unsat  *engine.UnsatisfiableError
	)
	switch {
	case errors.As(err, &apiErr):
		d.Message, d.Field = apiErr.Message, apiErr.Field
	case errors.As(err, &valErr):
		d.Message, d.Field = valErr.Message, valErr.Field
	case errors.As(err, &unsat):
		d.Message, d.Field = unsat.Message, unsat.Field
	case status == http.StatusRequestEntityTooLarge:
		d.Message = "request body is too large"
		var maxBytes *http.MaxBytesError
		if errors.As(err, &maxBytes) {
			d.Message = "request body is over the limit of " + fmtBytes(maxBytes.Limit)
		}
	case status == http.StatusServiceUnavailable:
		d.Message = "a dependency of the orchestrator is unavailable; retry later"
	case status == http.StatusInternalServerError:
		d.Message = "internal error"
	case errors.Is(err, store.ErrNotFound):
		d.Message = "not found"
	default:
		// 409s: the engine's message says what clashed and carries no internals.
		d.Message = err.Error()
	}
	return wire.ErrorBody{Error: d}
}

// errorDetail is what a client is told of err: its status and wire.ErrorDetail. It is the
// answer of writeError, and the error of a failed item of a batch (POST /jobs/submit_batch).
func errorDetail(err error) (int, wire.ErrorDetail) {
	status, code := ErrorStatus(err)
	return status, errorBody(err, status, code).Error
}

// writeError answers c with err as a wire.ErrorBody and aborts the handler chain. A 500 is a
// bug and is logged at error level; a 503 is logged at warn.
func (s *Server) writeError(c *gin.Context, err error) {
	status, code := ErrorStatus(err)
	s.logError(c, status, err)
	if status == http.StatusUnauthorized {
		c.Header("WWW-Authenticate", `Bearer realm="orchestrator"`)
	}
	c.AbortWithStatusJSON(status, errorBody(err, status, code))
}

// logError logs an error answered with status: a 500 at error level (a bug), a 503 at warn (a
// dependency), or at debug when the client went away; the client's own mistakes not at all.
// attrs are added to the line.
func (s *Server) logError(c *gin.Context, status int, err error, attrs ...any) {
	route := c.FullPath()
	switch {
	case status == http.StatusServiceUnavailable && c.Request.Context().Err() != nil:
		// The client went away; nobody reads the answer.
		s.log.Debug("request cancelled", append([]any{"route", route, "error", err}, attrs...)...)
	case status == http.StatusServiceUnavailable:
		s.log.Warn("dependency unavailable", append([]any{"route", route, "error", err}, attrs...)...)
	case status >= http.StatusInternalServerError:
		s.log.Error("internal error", append([]any{"route", route, "method", c.Request.Method, "error", err}, attrs...)...)
	}
}

// fmtBytes names a byte count exactly and, from a MiB on, in MiB: "1114112 bytes (1.06 MiB)".
func fmtBytes(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d bytes (%.2f MiB)", n, float64(n)/(1<<20))
}

// turn is the handler of a POST that turns the switch of the one object its path names (a
// schedule's pause, a webhook's enable) to on: id reads the id (answering the request itself
// when it is bad), set turns the switch as the caller, and the answer is 200 with conv of the
// object, or set's error.
func turn[V, W any](s *Server, id func(*gin.Context) (string, bool),
	set func(ctx context.Context, id string, on bool, actor string) (V, error), conv func(V) W, on bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		key, ok := id(c)
		if !ok {
			return
		}
		v, err := set(c.Request.Context(), key, on, mustIdentity(c).Actor())
		if err != nil {
			s.writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, conv(v))
	}
}

// remove is the handler of a DELETE of the one object its path names: id reads the id
// (answering the request itself when it is bad), del deletes the object as the caller, and the
// answer is 204, or del's error.
func remove(s *Server, id func(*gin.Context) (string, bool), del func(ctx context.Context, id, actor string) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		key, ok := id(c)
		if !ok {
			return
		}
		if err := del(c.Request.Context(), key, mustIdentity(c).Actor()); err != nil {
			s.writeError(c, err)
			return
		}
		c.Status(http.StatusNoContent)
	}
}

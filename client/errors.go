package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxErrorText caps the part of a non-JSON error answer kept in APIError.Message.
const maxErrorText = 512

// APIError is a non-2xx answer of the API. Code, Message and Field come from the ErrorBody; an
// answer without one (a proxy's HTML page) gets Code "http_<status>" and the start of its text.
type APIError struct {
	StatusCode int
	Code       string
	Message    string
	// Field names the offending input field of a 400.
	Field string
	// RetryAfter is the parsed Retry-After header of a 429 or 503 (0 when absent).
	RetryAfter time.Duration

	body []byte // the raw answer, for callers that decode another shape (Readyz)
}

// Error describes the answer: "409 conflict: job exists (field job_id)".
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.StatusCode, e.Code)
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Field != "" {
		b.WriteString(" (field " + e.Field + ")")
	}
	if e.RetryAfter > 0 {
		b.WriteString(" (retry after " + e.RetryAfter.String() + ")")
	}
	return b.String()
}

// Temporary reports whether the same call may succeed later: 408, 429 and 5xx answers.
func (e *APIError) Temporary() bool {
	return e.StatusCode == http.StatusRequestTimeout || e.StatusCode == http.StatusTooManyRequests ||
		e.StatusCode >= 500
}

// IsStatus reports whether err is (or wraps) an *APIError with the given HTTP status.
func IsStatus(err error, code int) bool {
	e, ok := asAPIError(err)
	return ok && e.StatusCode == code
}

func asAPIError(err error) (*APIError, bool) {
	var e *APIError
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

func newAPIError(resp *http.Response, raw []byte) *APIError {
	e := &APIError{
		StatusCode: resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		body:       raw,
	}
	var eb ErrorBody
	if err := json.Unmarshal(raw, &eb); err == nil && eb.Error.Code != "" {
		e.Code, e.Message, e.Field = eb.Error.Code, eb.Error.Message, eb.Error.Field
		return e
	}
	e.Code = "http_" + strconv.Itoa(resp.StatusCode)
	msg := strings.TrimSpace(string(raw))
	if len(msg) > maxErrorText {
		msg = msg[:maxErrorText] + "…"
	}
	e.Message = msg
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// parseRetryAfter reads delay-seconds or an HTTP date; anything else is 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d.Round(time.Second)
		}
	}
	return 0
}

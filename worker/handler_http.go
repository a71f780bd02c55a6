package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/config"
)

// HTTP handler defaults.
const (
	// HTTPMaxResponseBytesDefault caps the response body kept as the result.
	HTTPMaxResponseBytesDefault = 1 << 20
	// httpErrorBodyBytes is how much of a failed response's body goes into the error.
	httpErrorBodyBytes = 1 << 10
)

// HTTPConfig configures NewHTTPHandler.
type HTTPConfig struct {
	// JobTypes give each type's URL (config.JobType.URL).
	JobTypes map[string]*config.JobType
	// Client sends the requests (default: a client whose transport has dial and TLS timeouts;
	// the request's deadline comes from the job's context).
	Client *http.Client
	// MaxResponseBytes caps the result (HTTPMaxResponseBytesDefault).
	MaxResponseBytes int64
	// DefaultTimeout bounds a request whose context has no deadline
	// (config.HTTPHandlerTimeoutDefault).
	DefaultTimeout time.Duration
	// Logger receives warnings such as truncated responses.
	Logger *slog.Logger
}

// HTTPHandler POSTs the job's payload to its type's URL: the way to hand work to a model server
// that already speaks HTTP. 2xx succeeds with the body as the result; 4xx fails for good
// (the request itself is wrong), except 408 and 429 which, like 5xx and network errors, are
// retried.
type HTTPHandler struct {
	cfg HTTPConfig
	log *slog.Logger
}

// NewHTTPHandler returns an HTTPHandler with defaults filled in.
func NewHTTPHandler(cfg HTTPConfig) *HTTPHandler {
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   32,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}}
	}
	cfg.MaxResponseBytes = cmp.Or(cfg.MaxResponseBytes, HTTPMaxResponseBytesDefault)
	cfg.DefaultTimeout = cmp.Or(cfg.DefaultTimeout, config.HTTPHandlerTimeoutDefault)
	log := cmp.Or(cfg.Logger, slog.Default())
	return &HTTPHandler{cfg: cfg, log: log.With("component", "worker", "handler", "http")}
}

// CheckType fails when the type has no usable http(s) URL.
func (h *HTTPHandler) CheckType(t *config.JobType) error {
	if t.URL == "" {
		return errors.New("http handler: the type has no url")
	}
	u, err := url.Parse(t.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("http handler: url %q: want http(s)://host/path", t.URL)
	}
	return nil
}

// Run POSTs the payload and classifies the answer.
func (h *HTTPHandler) Run(ctx context.Context, job Job) (json.RawMessage, error) {
	t := h.cfg.JobTypes[job.Type]
	if t == nil || t.URL == "" {
		return nil, NonRetryable(fmt.Errorf("http: job type %q has no url", job.Type))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.cfg.DefaultTimeout)
		defer cancel()
	}
	body := job.Payload
	if len(body) == 0 {
		body = json.RawMessage("null")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return nil, NonRetryable(fmt.Errorf("http: build request to %s: %w", t.URL, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Orch-Job-Id", job.ID)
	req.Header.Set("X-Orch-Attempt", strconv.Itoa(job.Attempt))
	// The same key for every attempt lets the server deduplicate a retried request.
	req.Header.Set("Idempotency-Key", job.ID)
	if job.LeaseToken != "" {
		req.Header.Set("X-Orch-Lease-Token", job.LeaseToken)
	}
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("http: post to %s: %w", t.URL, err)
	}
	defer func() { _ = resp.Body.Close() }() // read to the limit below; a close error loses nothing
	raw, err := io.ReadAll(io.LimitReader(resp.Body, h.cfg.MaxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("http: read response of %s: %w", t.URL, err)
	}
	truncated := int64(len(raw)) > h.cfg.MaxResponseBytes
	if truncated {
		raw = raw[:h.cfg.MaxResponseBytes]
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code <= 299:
		if truncated {
			h.log.Warn("http response truncated", "job_id", job.ID, "url", t.URL,
				"max_response_bytes", h.cfg.MaxResponseBytes)
		}
		return outputJSON(raw), nil
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return nil, fmt.Errorf("http: %s answered %s%s", t.URL, resp.Status, bodySnippet(raw))
	default:
		return nil, NonRetryable(fmt.Errorf("http: %s answered %s%s", t.URL, resp.Status, bodySnippet(raw)))
	}
}

func bodySnippet(b []byte) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(b[:min(len(b), httpErrorBodyBytes)]), "�"))
	if s == "" {
		return ""
	}
	return ": " + s
}

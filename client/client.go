// Package client is the typed Go client of the orchestrator's HTTP API, for agents, orchctl and
// the worker binary. The request and answer types are package wire's, re-exported here as
// aliases (client.SubmitRequest is wire.SubmitRequest), so the SDK's users need no other import.
package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of New.
const (
	// TimeoutDefault bounds every call whose context carries no earlier deadline.
	TimeoutDefault = 30 * time.Second
	// MaxResponseBytesDefault caps how much of an answer is read, so a broken or hostile server
	// cannot exhaust the caller's memory. Job lists with large payloads fit well below it.
	MaxResponseBytesDefault = 64 << 20
	// UserAgentDefault is sent when no WithUserAgent option is given.
	UserAgentDefault = "gpuorch-client/1"
)

// Client calls the orchestrator's HTTP API. It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[:port][/path] without a trailing slash
	token     string
	hc        *http.Client
	timeout   time.Duration
	userAgent string
	maxBody   int64
	tlsConfig *tls.Config
}

// Option configures New.
type Option func(*Client)

// WithHTTPClient replaces the default *http.Client (for custom transports or TLS). Every call
// still gets a deadline from WithTimeout when its context has none.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTimeout sets the per-call time limit (default TimeoutDefault). Values <= 0 are ignored:
// no call runs without a deadline.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithUserAgent sets the User-Agent header (e.g. "worker/<id>"), which shows in server logs.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a Client of the API at baseURL (e.g. "http://127.0.0.1:8080") that authenticates
// with the bearer token (none when empty).
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		base:      strings.TrimRight(baseURL, "/"),
		token:     token,
		timeout:   TimeoutDefault,
		userAgent: UserAgentDefault,
		maxBody:   MaxResponseBytesDefault,
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{
			Timeout: c.timeout,
			Transport: &http.Transport{
				Proxy:                 http.ProxyFromEnvironment,
				DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConns:          100,
				MaxIdleConnsPerHost:   32,
				IdleConnTimeout:       90 * time.Second,
				TLSHandshakeTimeout:   5 * time.Second,
				TLSClientConfig:       c.tlsConfig,
				ResponseHeaderTimeout: c.timeout,
				ExpectContinueTimeout: time.Second,
			},
		}
	}
	return c
}

// Submit submits a job (POST /jobs/submit). A repeated job_id answers the existing job with
// Created false.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (SubmitResponse, error) {
	return callKeyed[SubmitResponse](ctx, c, req.JobID, http.MethodPost, "/jobs/submit", nil, req, "submit job")
}

// SubmitBatch submits 1 to SubmitBatchMax jobs in one request (POST /jobs/submit_batch): each
// job is validated, admitted and answered on its own, so a refused job is an item of the
// answer (SubmitBatchResult.Error), not an error; the error is for a request refused whole
// (a malformed body, too many jobs, auth) or one that failed.
func (c *Client) SubmitBatch(ctx context.Context, req SubmitBatchRequest) (SubmitBatchResponse, error) {
	return callKeyed[SubmitBatchResponse](ctx, c, batchKey(req.Jobs), http.MethodPost, "/jobs/submit_batch", nil, req,
		"submit batch of jobs")
}

// GetJob returns one job (GET /jobs/{id}).
func (c *Client) GetJob(ctx context.Context, id string) (Job, error) {
	return call[Job](ctx, c, http.MethodGet, "/jobs/"+url.PathEscape(id), nil, nil, "get job "+id)
}

// ListJobsParams filter GET /jobs; empty fields are not sent.
type ListJobsParams struct {
	Status string
	Type   string
	Agent  string
	// Limit is the page size (0: the server's default).
	Limit int
	// Cursor is the NextCursor of the previous page.
	Cursor string
}

// ListJobs returns one page of jobs (GET /jobs).
func (c *Client) ListJobs(ctx context.Context, p ListJobsParams) (JobList, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("status", p.Status)
	set("type", p.Type)
	set("agent", p.Agent)
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	set("cursor", p.Cursor)
	return call[JobList](ctx, c, http.MethodGet, "/jobs", q, nil, "list jobs")
}

// CancelJob cancels a job (POST /jobs/{id}/cancel) and returns it as it is afterwards.
func (c *Client) CancelJob(ctx context.Context, id string) (Job, error) {
	return call[Job](ctx, c, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/cancel", nil, struct{}{}, "cancel job "+id)
}

// Claim claims a batch of stream entries for a worker (POST /internal/jobs/claim).
func (c *Client) Claim(ctx context.Context, req ClaimRequest) (ClaimResponse, error) {
	return call[ClaimResponse](ctx, c, http.MethodPost, "/internal/jobs/claim", nil, req, "claim jobs")
}

// Start reports that the handlers of claimed jobs began (POST /internal/jobs/start).
func (c *Client) Start(ctx context.Context, req StartRequest) (StartResponse, error) {
	return call[StartResponse](ctx, c, http.MethodPost, "/internal/jobs/start", nil, req, "report job starts")
}

// Complete reports the outcomes of attempts (POST /internal/jobs/complete).
func (c *Client) Complete(ctx context.Context, req CompleteRequest) (CompleteResponse, error) {
	return call[CompleteResponse](ctx, c, http.MethodPost, "/internal/jobs/complete", nil, req, "report job results")
}

// Healthz asks whether the process is alive (GET /healthz).
func (c *Client) Healthz(ctx context.Context) (Health, error) { return c.health(ctx, "/healthz") }

// Readyz asks whether the server can serve (GET /readyz). A 503 returns the Health with the
// failing checks together with an *APIError.
func (c *Client) Readyz(ctx context.Context) (Health, error) { return c.health(ctx, "/readyz") }

func (c *Client) health(ctx context.Context, path string) (Health, error) {
	var out Health
	err := c.do(ctx, http.MethodGet, path, nil, nil, &out)
	if apiErr, ok := asAPIError(err); ok && len(apiErr.body) > 0 {
		// /readyz answers 503 with a Health body naming the failing checks: keep it.
		_ = json.Unmarshal(apiErr.body, &out)
	}
	return out, wrap(err, "check "+strings.TrimPrefix(path, "/"))
}

// batchKey is the idempotency key of a batch whose every job has a job_id (a digest of the
// ids), "" otherwise.
func batchKey(jobs []SubmitRequest) string {
	h := sha256.New()
	for _, j := range jobs {
		if j.JobID == "" {
			return ""
		}
		h.Write([]byte(j.JobID)) // a hash.Hash never returns an error
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// call sends one request (see do) and returns its decoded answer, or an error that says what
// the call was for.
func call[T any](ctx context.Context, c *Client, method, path string, q url.Values, in any, what string) (T, error) {
	return callKeyed[T](ctx, c, "", method, path, q, in, what)
}

// callKeyed is call for a request that may be sent twice (see doKeyed).
func callKeyed[T any](ctx context.Context, c *Client, key, method, path string, q url.Values, in any, what string) (T, error) {
	var out T
	err := c.doKeyed(ctx, key, method, path, q, in, &out)
	return out, wrap(err, what)
}

// do sends one request with a JSON body (when in is not nil) and decodes a 2xx answer into out.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	return c.doKeyed(ctx, "", method, path, q, in, out)
}

// doKeyed is do for a request that may be sent twice with the same effect when key is not
// empty: a submit whose jobs have a job_id. It goes with an Idempotency-Key header, which
// lets Go's transport send it again on a new connection when a kept-alive one turns out closed
// (a load balancer's or the server's idle timeout racing the request), instead of failing it.
// The server does not read the header: a repeated job_id is what makes the submit idempotent.
func (c *Client) doKeyed(ctx context.Context, key, method, path string, q url.Values, in, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }() // read below; a close error loses nothing
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return fmt.Errorf("read answer of %s %s: %w", method, path, err)
	}
	if int64(len(raw)) > c.maxBody {
		return fmt.Errorf("read answer of %s %s: larger than %d bytes", method, path, c.maxBody)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return newAPIError(resp, raw)
	}
	if out == nil || len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return nil
}

func wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

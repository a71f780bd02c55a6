package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// GrantLease asks for a lease (POST /leases).
func (c *Client) GrantLease(ctx context.Context, req LeaseRequest) (LeaseGrant, error) {
	var out LeaseGrant
	err := c.do(ctx, http.MethodPost, "/leases", nil, req, &out)
	return out, wrap(err, "grant lease")
}

// HeartbeatLease extends a lease by its TTL (POST /leases/{token}/heartbeat). An unknown token
// is a 404, a lease that ended a 410.
func (c *Client) HeartbeatLease(ctx context.Context, token string) (Lease, error) {
	var out Lease
	err := c.do(ctx, http.MethodPost, "/leases/"+url.PathEscape(token)+"/heartbeat", nil, struct{}{}, &out)
	return out, wrap(err, "heartbeat lease")
}

// ReleaseLease ends a lease (POST /leases/{token}/release).
func (c *Client) ReleaseLease(ctx context.Context, token string) (Lease, error) {
	var out Lease
	err := c.do(ctx, http.MethodPost, "/leases/"+url.PathEscape(token)+"/release", nil, struct{}{}, &out)
	return out, wrap(err, "release lease")
}

// ListLeasesParams filter GET /leases; empty fields are not sent.
type ListLeasesParams struct {
	Status string
	Agent  string
	NodeID string
	JobID  string
	Limit  int
}

// ListLeases lists leases, newest first (GET /leases).
func (c *Client) ListLeases(ctx context.Context, p ListLeasesParams) (LeaseList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"status": p.Status, "agent": p.Agent, "node_id": p.NodeID, "job_id": p.JobID} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var out LeaseList
	err := c.do(ctx, http.MethodGet, "/leases", q, nil, &out)
	return out, wrap(err, "list leases")
}

// RenewLeases renews a worker's leases and reports its telemetry (POST /internal/leases/renew).
func (c *Client) RenewLeases(ctx context.Context, req RenewRequest) (RenewResponse, error) {
	var out RenewResponse
	err := c.do(ctx, http.MethodPost, "/internal/leases/renew", nil, req, &out)
	return out, wrap(err, "renew leases")
}

// ListGPUs lists the GPUs of every node (or of nodeID) with their reservations (GET /gpus).
func (c *Client) ListGPUs(ctx context.Context, nodeID string) (GPUList, error) {
	q := url.Values{}
	if nodeID != "" {
		q.Set("node_id", nodeID)
	}
	var out GPUList
	err := c.do(ctx, http.MethodGet, "/gpus", q, nil, &out)
	return out, wrap(err, "list gpus")
}

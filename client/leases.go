package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// GrantLease asks for a lease (POST /leases).
func (c *Client) GrantLease(ctx context.Context, req LeaseRequest) (LeaseGrant, error) {
	return call[LeaseGrant](ctx, c, http.MethodPost, "/leases", nil, req, "grant lease")
}

// HeartbeatLease extends a lease by its TTL (POST /leases/{token}/heartbeat). An unknown token
// is a 404, a lease that ended a 410.
func (c *Client) HeartbeatLease(ctx context.Context, token string) (Lease, error) {
	return call[Lease](ctx, c, http.MethodPost, "/leases/"+url.PathEscape(token)+"/heartbeat", nil, struct{}{},
		"heartbeat lease")
}

// ReleaseLease ends a lease (POST /leases/{token}/release).
func (c *Client) ReleaseLease(ctx context.Context, token string) (Lease, error) {
	return call[Lease](ctx, c, http.MethodPost, "/leases/"+url.PathEscape(token)+"/release", nil, struct{}{}, "release lease")
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
	return call[LeaseList](ctx, c, http.MethodGet, "/leases", q, nil, "list leases")
}

// RenewLeases renews a worker's leases and reports its telemetry (POST /internal/leases/renew).
func (c *Client) RenewLeases(ctx context.Context, req RenewRequest) (RenewResponse, error) {
	return call[RenewResponse](ctx, c, http.MethodPost, "/internal/leases/renew", nil, req, "renew leases")
}

// ListGPUs lists the GPUs of every node (or of nodeID) with their reservations (GET /gpus).
func (c *Client) ListGPUs(ctx context.Context, nodeID string) (GPUList, error) {
	q := url.Values{}
	if nodeID != "" {
		q.Set("node_id", nodeID)
	}
	return call[GPUList](ctx, c, http.MethodGet, "/gpus", q, nil, "list gpus")
}

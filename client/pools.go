package client

import (
	"context"
	"net/http"
	"net/url"
)

// CreatePool creates or updates a worker pool (POST /workers/pool).
func (c *Client) CreatePool(ctx context.Context, req PoolRequest) (PoolResponse, error) {
	return call[PoolResponse](ctx, c, http.MethodPost, "/workers/pool", nil, req, "create pool "+req.PoolID)
}

// ListPools returns every pool (GET /workers/pools).
func (c *Client) ListPools(ctx context.Context) (PoolList, error) {
	return call[PoolList](ctx, c, http.MethodGet, "/workers/pools", nil, nil, "list pools")
}

// GetPool returns one pool with its workers (GET /workers/pools/{id}).
func (c *Client) GetPool(ctx context.Context, id string) (Pool, error) {
	return call[Pool](ctx, c, http.MethodGet, "/workers/pools/"+url.PathEscape(id), nil, nil, "get pool "+id)
}

// HeartbeatPool tells the orchestrator the pool's agent still wants it warm
// (POST /workers/pools/{id}/heartbeat).
func (c *Client) HeartbeatPool(ctx context.Context, id string) (Pool, error) {
	return call[Pool](ctx, c, http.MethodPost, "/workers/pools/"+url.PathEscape(id)+"/heartbeat", nil, struct{}{},
		"heartbeat pool "+id)
}

// DrainPool drains one pool (POST /workers/pools/{id}/drain).
func (c *Client) DrainPool(ctx context.Context, id string) (PoolChange, error) {
	return call[PoolChange](ctx, c, http.MethodPost, "/workers/pools/"+url.PathEscape(id)+"/drain", nil, struct{}{},
		"drain pool "+id)
}

// DrainAll drains every pool (POST /control/drain).
func (c *Client) DrainAll(ctx context.Context) (DrainAllResponse, error) {
	return call[DrainAllResponse](ctx, c, http.MethodPost, "/control/drain", nil, struct{}{}, "drain all pools")
}

// EvictPool evicts one pool (POST /control/evict_pool).
func (c *Client) EvictPool(ctx context.Context, id string) (PoolChange, error) {
	return call[PoolChange](ctx, c, http.MethodPost, "/control/evict_pool", nil, EvictRequest{PoolID: id}, "evict pool "+id)
}

// Reconcile asks for a reconciliation pass now (POST /control/reconcile).
func (c *Client) Reconcile(ctx context.Context) (ReconcileResponse, error) {
	return call[ReconcileResponse](ctx, c, http.MethodPost, "/control/reconcile", nil, struct{}{}, "reconcile pools")
}

// RegisterWorker registers a worker (POST /internal/workers/register).
func (c *Client) RegisterWorker(ctx context.Context, req RegisterWorkerRequest) (WorkerInstruction, error) {
	return call[WorkerInstruction](ctx, c, http.MethodPost, "/internal/workers/register", nil, req,
		"register worker "+req.WorkerID)
}

// WorkerHeartbeat sends a worker's heartbeat (POST /internal/workers/{id}/heartbeat). A 404
// means the registry does not know the worker: register again.
func (c *Client) WorkerHeartbeat(ctx context.Context, id string, req WorkerHeartbeatRequest) (WorkerInstruction, error) {
	return call[WorkerInstruction](ctx, c, http.MethodPost, "/internal/workers/"+url.PathEscape(id)+"/heartbeat", nil, req,
		"heartbeat of worker "+id)
}

// DeregisterWorker removes a worker that exits cleanly (POST /internal/workers/{id}/deregister).
func (c *Client) DeregisterWorker(ctx context.Context, id string) error {
	err := c.do(ctx, http.MethodPost, "/internal/workers/"+url.PathEscape(id)+"/deregister", nil, struct{}{}, nil)
	return wrap(err, "deregister worker "+id)
}

package client

import (
	"context"
	"net/http"
)

// Status returns the cluster at a glance (GET /status).
func (c *Client) Status(ctx context.Context) (Status, error) {
	return call[Status](ctx, c, http.MethodGet, "/status", nil, nil, "get status")
}

package client

import (
	"context"
	"net/http"
)

// Status returns the cluster at a glance (GET /status).
func (c *Client) Status(ctx context.Context) (Status, error) {
	var out Status
	err := c.do(ctx, http.MethodGet, "/status", nil, nil, &out)
	return out, wrap(err, "get status")
}

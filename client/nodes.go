package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuorch/orchestrator/wire"
)

// The wire types of the node registry.
type (
	// Node is wire.Node.
	Node = wire.Node
	// NodeList is wire.NodeList.
	NodeList = wire.NodeList
	// NodeWorker is wire.NodeWorker.
	NodeWorker = wire.NodeWorker
	// NodeLease is wire.NodeLease.
	NodeLease = wire.NodeLease
	// CordonRequest is wire.CordonRequest.
	CordonRequest = wire.CordonRequest
)

// ListNodes returns every node (GET /nodes).
func (c *Client) ListNodes(ctx context.Context) (NodeList, error) {
	return call[NodeList](ctx, c, http.MethodGet, "/nodes", nil, nil, "list nodes")
}

// GetNode returns one node (GET /nodes/{id}).
func (c *Client) GetNode(ctx context.Context, id string) (Node, error) {
	return call[Node](ctx, c, http.MethodGet, "/nodes/"+url.PathEscape(id), nil, nil, "get node "+id)
}

// CordonNode keeps the scheduler from placing new jobs on the node (POST /nodes/{id}/cordon).
func (c *Client) CordonNode(ctx context.Context, id, reason string) (Node, error) {
	return call[Node](ctx, c, http.MethodPost, "/nodes/"+url.PathEscape(id)+"/cordon", nil, CordonRequest{Reason: reason},
		"cordon node "+id)
}

// UncordonNode lets the scheduler place on the node again (POST /nodes/{id}/uncordon).
func (c *Client) UncordonNode(ctx context.Context, id, reason string) (Node, error) {
	return call[Node](ctx, c, http.MethodPost, "/nodes/"+url.PathEscape(id)+"/uncordon", nil, CordonRequest{Reason: reason},
		"uncordon node "+id)
}

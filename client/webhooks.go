package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpuorch/orchestrator/wire"
)

// The wire types of webhooks.
type (
	// WebhookRequest is wire.WebhookRequest.
	WebhookRequest = wire.WebhookRequest
	// WebhookFilter is wire.WebhookFilter.
	WebhookFilter = wire.WebhookFilter
	// Webhook is wire.Webhook.
	Webhook = wire.Webhook
	// WebhookList is wire.WebhookList.
	WebhookList = wire.WebhookList
	// WebhookDelivery is wire.WebhookDelivery.
	WebhookDelivery = wire.WebhookDelivery
	// WebhookAttempt is wire.WebhookAttempt.
	WebhookAttempt = wire.WebhookAttempt
	// WebhookDeliveryList is wire.WebhookDeliveryList.
	WebhookDeliveryList = wire.WebhookDeliveryList
	// WebhookEvent is wire.WebhookEvent: the body of every delivery.
	WebhookEvent = wire.WebhookEvent
	// WebhookJobData is wire.WebhookJobData.
	WebhookJobData = wire.WebhookJobData
	// CallbackSecret is wire.CallbackSecret.
	CallbackSecret = wire.CallbackSecret
	// PreRunRequest is wire.PreRunRequest.
	PreRunRequest = wire.PreRunRequest
	// PreRunResponse is wire.PreRunResponse.
	PreRunResponse = wire.PreRunResponse
)

// CreateWebhook subscribes an endpoint (POST /webhooks, admin); the answer carries its secret,
// which no later answer shows.
func (c *Client) CreateWebhook(ctx context.Context, req WebhookRequest) (Webhook, error) {
	return call[Webhook](ctx, c, http.MethodPost, "/webhooks", nil, req, "create webhook")
}

// ListWebhooks returns every subscription (GET /webhooks, admin).
func (c *Client) ListWebhooks(ctx context.Context) (WebhookList, error) {
	return call[WebhookList](ctx, c, http.MethodGet, "/webhooks", nil, nil, "list webhooks")
}

// GetWebhook returns one subscription (GET /webhooks/{id}, admin).
func (c *Client) GetWebhook(ctx context.Context, id string) (Webhook, error) {
	return call[Webhook](ctx, c, http.MethodGet, "/webhooks/"+url.PathEscape(id), nil, nil, "get webhook "+id)
}

// DeleteWebhook unsubscribes an endpoint and drops its deliveries (DELETE /webhooks/{id}, admin).
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return wrap(c.do(ctx, http.MethodDelete, "/webhooks/"+url.PathEscape(id), nil, nil, nil), "delete webhook "+id)
}

// SetWebhookEnabled enables or disables a subscription (POST /webhooks/{id}/enable|disable, admin).
func (c *Client) SetWebhookEnabled(ctx context.Context, id string, enabled bool) (Webhook, error) {
	verb := "disable"
	if enabled {
		verb = "enable"
	}
	return call[Webhook](ctx, c, http.MethodPost, "/webhooks/"+url.PathEscape(id)+"/"+verb, nil, struct{}{}, verb+" webhook "+id)
}

// ListWebhookDeliveries returns a page of a subscription's deliveries, newest first, each with
// its attempts (GET /webhooks/{id}/deliveries, admin); cursor is the NextCursor of the
// previous page ("" for the first), limit 0 the server's default.
func (c *Client) ListWebhookDeliveries(ctx context.Context, id, cursor string, limit int) (WebhookDeliveryList, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return call[WebhookDeliveryList](ctx, c, http.MethodGet, "/webhooks/"+url.PathEscape(id)+"/deliveries", q, nil,
		"list deliveries of webhook "+id)
}

// GetCallbackSecret returns the key an agent's job callbacks are signed with
// (GET /webhooks/callback_secret): an agent token's own; an admin names the agent.
func (c *Client) GetCallbackSecret(ctx context.Context, agent string) (CallbackSecret, error) {
	q := url.Values{}
	if agent != "" {
		q.Set("agent", agent)
	}
	return call[CallbackSecret](ctx, c, http.MethodGet, "/webhooks/callback_secret", q, nil, "get callback secret")
}

// PreRun asks whether a claimed job may start (POST /internal/jobs/pre_run, worker).
func (c *Client) PreRun(ctx context.Context, req PreRunRequest) (PreRunResponse, error) {
	return call[PreRunResponse](ctx, c, http.MethodPost, "/internal/jobs/pre_run", nil, req, "pre-run check of job "+req.JobID)
}

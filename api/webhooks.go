package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/webhooks"
	"github.com/gpuorch/orchestrator/wire"
)

// webhookBodyBytes bounds the body of POST /webhooks: a URL and a few event names.
const webhookBodyBytes = 16 << 10

// Page sizes of GET /webhooks/{id}/deliveries.
const (
	deliveriesLimitDefault = 50
	deliveriesLimitMax     = 500
)

// webhooksEnabled answers 503 when the server runs without the webhooks service.
func (s *Server) webhooksEnabled(c *gin.Context) {
	if s.webhooks == nil {
		s.writeError(c, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "webhooks are not enabled on this server"})
		return
	}
	c.Next()
}

// createWebhook handles POST /webhooks (admin): 201 with the subscription and its secret,
// which no later answer shows.
func (s *Server) createWebhook(c *gin.Context) {
	var req wire.WebhookRequest
	if err := decodeJSON(c, webhookBodyBytes, &req); err != nil {
		s.writeError(c, err)
		return
	}
	p := webhooks.CreateParams{URL: req.URL, Events: req.Events, Actor: mustIdentity(c).Actor()}
	if req.Filter != nil {
		p.FilterType, p.FilterAgent = req.Filter.Type, req.Filter.Agent
	}
	sub, err := s.webhooks.Create(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, webhookError(err))
		return
	}
	out := webhookToWire(webhooks.View{WebhookSubscription: sub})
	out.Secret = sub.Secret
	c.JSON(http.StatusCreated, out)
}

// webhookError is the answer of a refusal of the webhooks service.
func webhookError(err error) error {
	var in *webhooks.InputError
	switch {
	case errors.As(err, &in):
		return badRequest(in.Field, "%s", in.Message)
	case errors.Is(err, webhooks.ErrNoCallbackSecret):
		return notFound("%s", err.Error())
	case errors.Is(err, webhooks.ErrTooMany):
		return &Error{Status: http.StatusConflict, Code: CodeConflict,
			Message: fmt.Sprintf("a cluster has at most %d webhook subscriptions: delete one first", webhooks.MaxSubscriptions)}
	}
	return err
}

// listWebhooks handles GET /webhooks (admin).
func (s *Server) listWebhooks(c *gin.Context) {
	vs, err := s.webhooks.List(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := wire.WebhookList{Webhooks: make([]wire.Webhook, len(vs))}
	for i, v := range vs {
		out.Webhooks[i] = webhookToWire(v)
	}
	c.JSON(http.StatusOK, out)
}

// getWebhook handles GET /webhooks/{id} (admin).
func (s *Server) getWebhook(c *gin.Context) {
	id, ok := s.webhookID(c)
	if !ok {
		return
	}
	v, err := s.webhooks.Get(c.Request.Context(), id)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, webhookToWire(v))
}

// webhookDeliveries handles GET /webhooks/{id}/deliveries?limit=&cursor= (admin): the
// subscription's deliveries, newest first, each with its attempts, by keyset pages.
func (s *Server) webhookDeliveries(c *gin.Context) {
	id, ok := s.webhookID(c)
	if !ok {
		return
	}
	limit, err := queryInt(c, "limit", deliveriesLimitDefault, 1, deliveriesLimitMax)
	if err != nil {
		s.writeError(c, err)
		return
	}
	var before int64
	if v := c.Query("cursor"); v != "" {
		if before, err = strconv.ParseInt(v, 10, 64); err != nil || before <= 0 {
			s.writeError(c, badRequest("cursor", "want the next_cursor of the previous page"))
			return
		}
	}
	page, more, err := s.webhooks.Deliveries(c.Request.Context(), id, before, limit)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := wire.WebhookDeliveryList{Deliveries: make([]wire.WebhookDelivery, len(page))}
	for i, d := range page {
		out.Deliveries[i] = deliveryToWire(d)
	}
	if more {
		out.NextCursor = strconv.FormatInt(page[len(page)-1].ID, 10)
	}
	c.JSON(http.StatusOK, out)
}

// callbackSecret handles GET /webhooks/callback_secret: the key an agent's job callbacks are
// signed with, for its receivers; an agent token gets its own agent's, an admin names the
// agent (?agent=).
func (s *Server) callbackSecret(c *gin.Context) {
	who := mustIdentity(c)
	agent := agentScope(who)
	if agent == "" {
		agent = c.Query("agent")
		if !ident.ID.MatchString(agent) {
			s.writeError(c, badID("agent", ident.ID))
			return
		}
	}
	secret, err := s.webhooks.CallbackSecret(agent)
	if err != nil {
		s.writeError(c, webhookError(err))
		return
	}
	c.JSON(http.StatusOK, wire.CallbackSecret{Agent: agent, Secret: secret})
}

// webhookID is the path's subscription id, or false after a 400.
func (s *Server) webhookID(c *gin.Context) (string, bool) {
	id := c.Param("id")
	if !ident.ID.MatchString(id) {
		s.writeError(c, badID("id", ident.ID))
		return "", false
	}
	return id, true
}

// queryInt reads an integer query parameter in lo..hi, def when absent.
func queryInt(c *gin.Context, name string, def, lo, hi int) (int, error) {
	v := c.Query(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, badRequest(name, "want an integer in %d..%d", lo, hi)
	}
	return n, nil
}

func webhookToWire(v webhooks.View) wire.Webhook {
	out := wire.Webhook{ID: v.ID, URL: v.URL, Events: v.Events, Status: string(v.Status),
		ConsecutiveFailures: v.ConsecutiveFailures, DisabledReason: v.DisabledReason, DisabledAt: utcPtr(v.DisabledAt),
		PendingDeliveries: v.Pending, CreatedBy: v.CreatedBy, CreatedAt: v.CreatedAt.UTC(), UpdatedAt: v.UpdatedAt.UTC()}
	if v.FilterType != "" || v.FilterAgent != "" {
		out.Filter = &wire.WebhookFilter{Type: v.FilterType, Agent: v.FilterAgent}
	}
	if !v.RetryAt.IsZero() {
		at := v.RetryAt.UTC()
		out.RetryAt = &at
	}
	return out
}

func deliveryToWire(d webhooks.DeliveryView) wire.WebhookDelivery {
	out := wire.WebhookDelivery{ID: d.ID, EventID: "evt_" + strconv.FormatInt(d.EventID, 10), EventType: d.EventType,
		JobID: d.JobID, IdempotencyKey: d.IdempotencyKey, Status: string(d.Status), Attempts: d.WebhookDelivery.Attempts,
		LastStatusCode: d.LastStatusCode, LastError: d.LastError, CreatedAt: d.CreatedAt.UTC(), FinishedAt: utcPtr(d.FinishedAt),
		History: make([]wire.WebhookAttempt, len(d.Attempts))}
	if d.Status == store.DeliveryPending {
		at := d.NextAttemptAt.UTC()
		out.NextAttemptAt = &at
	}
	for i, a := range d.Attempts {
		out.History[i] = wire.WebhookAttempt{Attempt: a.Attempt, StatusCode: a.StatusCode, Error: a.Error,
			StartedAt: a.StartedAt.UTC(), DurationMS: float64(a.Duration.Microseconds()) / 1000}
	}
	return out
}

package webhooks

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/hookurl"
	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/store"
)

// MaxSubscriptions bounds the subscriptions of a cluster: every event is matched against all
// of them, and each is a delivery row per event.
const MaxSubscriptions = 100

// InputError refuses a request for one of its fields (the API answers 400 naming it).
type InputError struct {
	Field   string
	Message string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Message }

// ErrTooMany refuses a subscription past MaxSubscriptions (the API answers 409).
var ErrTooMany = fmt.Errorf("a cluster has at most %d webhook subscriptions: %w", MaxSubscriptions, store.ErrConflict)

// View is a subscription with its pending deliveries, as the API shows it.
type View struct {
	store.WebhookSubscription
	Pending int
}

// Service is the webhooks' side of the API: subscriptions, their deliveries, the callback
// secrets and the checks of a job's callback_url. Any instance serves it; only the leader
// sends.
type Service struct {
	st       Store
	cfg      config.Webhooks
	types    func(string) bool
	resolver hookurl.Resolver
	now      func() time.Time
}

// ServiceOptions are the Service's optional collaborators.
type ServiceOptions struct {
	// Resolver looks up a subscription's host at creation (default net.DefaultResolver).
	Resolver hookurl.Resolver
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// NewService returns the Service over st for the configuration cfg.
func NewService(st Store, cfg *config.Config, opts ServiceOptions) *Service {
	s := &Service{st: st, cfg: cfg.Webhooks, types: func(t string) bool { return cfg.JobType(t) != nil },
		resolver: opts.Resolver, now: opts.Now}
	if s.resolver == nil {
		s.resolver = net.DefaultResolver
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// CreateParams are a new subscription's.
type CreateParams struct {
	URL                     string
	Events                  []string
	FilterType, FilterAgent string
	Actor                   string
}

// Create checks p and subscribes its URL: the answer carries the secret, which is shown
// this once. Audited webhook.created (without the secret, and with the URL's host only: a
// URL may carry a credential).
func (s *Service) Create(ctx context.Context, p CreateParams) (store.WebhookSubscription, error) {
	u, err := hookurl.Check(p.URL, s.cfg.AllowPrivate)
	if err != nil {
		return store.WebhookSubscription{}, &InputError{Field: "url", Message: err.Error()}
	}
	if !s.cfg.AllowPrivate {
		if err := hookurl.CheckResolved(ctx, s.resolver, u); err != nil {
			return store.WebhookSubscription{}, &InputError{Field: "url", Message: err.Error()}
		}
	}
	if err := s.checkEvents(p); err != nil {
		return store.WebhookSubscription{}, err
	}
	subs, err := s.st.WebhookList(ctx)
	if err != nil {
		return store.WebhookSubscription{}, err
	}
	if len(subs) >= MaxSubscriptions {
		return store.WebhookSubscription{}, ErrTooMany
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	sub := store.WebhookSubscription{ID: newID(), URL: p.URL, Events: p.Events, FilterType: p.FilterType,
		FilterAgent: p.FilterAgent, Secret: NewSecret(), Status: store.WebhookActive, CreatedBy: p.Actor,
		CreatedAt: now, UpdatedAt: now}
	details, _ := json.Marshal(map[string]any{"webhook_id": sub.ID, "host": u.Host, "events": sub.Events,
		"filter_type": sub.FilterType, "filter_agent": sub.FilterAgent})
	err = s.st.WithTx(ctx, func(tx store.Tx) error {
		if err := tx.WebhookInsert(ctx, sub); err != nil {
			return err
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{{TS: now, EventType: AuditCreated, Actor: p.Actor, Details: details}})
	})
	if err != nil {
		return store.WebhookSubscription{}, fmt.Errorf("create webhook: %w", err)
	}
	return sub, nil
}

// checkEvents checks p's events and filter.
func (s *Service) checkEvents(p CreateParams) error {
	if len(p.Events) == 0 {
		return &InputError{Field: "events", Message: fmt.Sprintf("name at least one event of %v", Events)}
	}
	seen := map[string]bool{}
	for i, e := range p.Events {
		field := fmt.Sprintf("events[%d]", i)
		switch {
		case !Known(e):
			return &InputError{Field: field, Message: fmt.Sprintf("unknown event %q: want one of %v", e, Events)}
		case seen[e]:
			return &InputError{Field: field, Message: fmt.Sprintf("%q is listed twice", e)}
		}
		seen[e] = true
	}
	if p.FilterType != "" && !s.types(p.FilterType) {
		return &InputError{Field: "filter.type", Message: fmt.Sprintf("unknown job type %q", p.FilterType)}
	}
	if p.FilterAgent != "" && !ident.ID.MatchString(p.FilterAgent) {
		return &InputError{Field: "filter.agent", Message: "must be " + ident.ID.Rule()}
	}
	return nil
}

// newID is a fresh subscription id: "wh_" and 96 random bits.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "wh_" + hex.EncodeToString(b[:])
}

// List returns every subscription with its pending deliveries.
func (s *Service) List(ctx context.Context) ([]View, error) {
	subs, err := s.st.WebhookList(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := s.st.WebhookDeliveryCounts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]View, len(subs))
	for i, sub := range subs {
		out[i] = View{WebhookSubscription: sub, Pending: counts[sub.ID]}
	}
	return out, nil
}

// Get returns one subscription; store.ErrNotFound when there is none.
func (s *Service) Get(ctx context.Context, id string) (View, error) {
	sub, err := s.st.WebhookGet(ctx, id)
	if err != nil {
		return View{}, err
	}
	counts, err := s.st.WebhookDeliveryCounts(ctx)
	if err != nil {
		return View{}, err
	}
	return View{WebhookSubscription: sub, Pending: counts[id]}, nil
}

// Delete unsubscribes id and drops its deliveries, pending or not; audited webhook.deleted.
func (s *Service) Delete(ctx context.Context, id, actor string) error {
	now := s.now().UTC().Truncate(time.Microsecond)
	details, _ := json.Marshal(map[string]any{"webhook_id": id})
	return s.st.WithTx(ctx, func(tx store.Tx) error {
		if err := tx.WebhookDelete(ctx, id); err != nil {
			return err
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{{TS: now, EventType: AuditDeleted, Actor: actor, Details: details}})
	})
}

// SetEnabled enables id again (its failures forgotten, its pending deliveries due as they
// were) or disables it (nothing is queued for it or sent to it until it is enabled);
// audited webhook.enabled or webhook.disabled.
func (s *Service) SetEnabled(ctx context.Context, id string, enabled bool, actor string) (View, error) {
	now := s.now().UTC().Truncate(time.Microsecond)
	st := store.WebhookState{Status: store.WebhookActive, Now: now}
	event := AuditEnabled
	if !enabled {
		st = store.WebhookState{Status: store.WebhookDisabled, DisabledReason: "disabled by " + actor, DisabledAt: &now, Now: now}
		event = AuditDisabled
	}
	details, _ := json.Marshal(map[string]any{"webhook_id": id, "by": actor})
	err := s.st.WithTx(ctx, func(tx store.Tx) error {
		sub, err := tx.WebhookGet(ctx, id)
		if err != nil {
			return err
		}
		if (sub.Status == store.WebhookActive) == enabled {
			return nil // already so: nothing to write or audit
		}
		if enabled {
			st.From = store.WebhookDisabled
		} else {
			st.From, st.ConsecutiveFailures = store.WebhookActive, sub.ConsecutiveFailures
		}
		if err := tx.WebhookSetState(ctx, id, st); err != nil {
			return err
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{{TS: now, EventType: event, Actor: actor, Details: details}})
	})
	if err != nil {
		return View{}, fmt.Errorf("set webhook %s enabled=%t: %w", id, enabled, err)
	}
	return s.Get(ctx, id)
}

// DeliveryView is a delivery with its attempts.
type DeliveryView struct {
	store.WebhookDelivery
	Attempts []store.WebhookAttempt
}

// Deliveries returns a page of id's deliveries, newest first, before the delivery id before
// (0: from the newest), with their attempts; more says whether another page follows.
func (s *Service) Deliveries(ctx context.Context, id string, before int64, limit int) (page []DeliveryView, more bool, err error) {
	if _, err := s.st.WebhookGet(ctx, id); err != nil {
		return nil, false, err
	}
	limit = max(1, min(cmp.Or(limit, 50), 500))
	ds, err := s.st.WebhookDeliveryList(ctx, store.DeliveryListParams{SubscriptionID: id, BeforeID: before, Limit: limit + 1})
	if err != nil {
		return nil, false, err
	}
	if more = len(ds) > limit; more {
		ds = ds[:limit]
	}
	ids := make([]int64, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	attempts, err := s.st.WebhookAttemptList(ctx, ids)
	if err != nil {
		return nil, false, err
	}
	byDelivery := map[int64][]store.WebhookAttempt{}
	for _, a := range attempts {
		byDelivery[a.DeliveryID] = append(byDelivery[a.DeliveryID], a)
	}
	page = make([]DeliveryView, len(ds))
	for i, d := range ds {
		page[i] = DeliveryView{WebhookDelivery: d, Attempts: byDelivery[d.ID]}
	}
	return page, more, nil
}

// ErrNoCallbackSecret says that the cluster has no webhooks.callback_secret: its callbacks
// could not be signed.
var ErrNoCallbackSecret = errors.New("this cluster has no webhooks.callback_secret, so a callback could not be signed; " +
	"an operator sets one (docs/configuration.md, Webhooks)")

// CallbackSecret is the key agent's callbacks are signed with.
func (s *Service) CallbackSecret(agent string) (string, error) {
	secret := CallbackSecret(s.cfg.CallbackSecret, agent)
	if secret == "" {
		return "", ErrNoCallbackSecret
	}
	return secret, nil
}

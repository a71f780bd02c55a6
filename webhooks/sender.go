package webhooks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/hookurl"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/store"
)

// sendRounds bounds the batches one RunOnce sends behind a backlog.
const sendRounds = 10

// leaderActor is the audit actor of what the sender decides (disabling an endpoint).
const leaderActor = "leader"

// SenderConfig configures a Sender.
type SenderConfig struct {
	// Interval between passes when nothing wakes it (± 10%); config.WebhooksIntervalDefault.
	Interval time.Duration
	// Wake, when not nil, starts a pass at once (the tail queued deliveries).
	Wake <-chan struct{}
	// Batch is the most deliveries a pass takes; Concurrency how many are in flight at once.
	Batch, Concurrency int
	// MaxAttempts gives a delivery up; MaxFailures disables an endpoint after that many failed
	// attempts in a row.
	MaxAttempts, MaxFailures int
	// Backoff spaces the attempts of a delivery, and of a failing endpoint.
	Backoff config.Backoff
	// CallbackSecret is the cluster's callback secret (webhooks.callback_secret): each agent's
	// callbacks are signed with CallbackSecret(it, agent). Empty: callbacks cannot be signed,
	// and their attempts fail until it is set.
	CallbackSecret string
	// Client sends the deliveries (default NewClient of the webhooks configuration's timeouts).
	Client *http.Client
	// Fence guards every write of a leader (nil: none).
	Fence store.Fence
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
	// Clock is the time source (default time.Now); Rand the jitter's (default math/rand).
	Clock func() time.Time
	Rand  func() float64
	// Metrics counts the attempts (nil: nothing counted).
	Metrics *Metrics
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// SenderConfigFrom fills cfg's zero fields from the webhooks configuration.
func SenderConfigFrom(c *config.Config, cfg SenderConfig) SenderConfig {
	w := c.Webhooks
	cfg.Interval = cmp.Or(cfg.Interval, w.Interval)
	cfg.Batch = cmp.Or(cfg.Batch, w.Batch)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, w.Concurrency)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, w.MaxAttempts)
	cfg.MaxFailures = cmp.Or(cfg.MaxFailures, w.MaxConsecutiveFailures)
	if cfg.Backoff == (config.Backoff{}) {
		cfg.Backoff = w.Backoff
	}
	cfg.CallbackSecret = cmp.Or(cfg.CallbackSecret, w.CallbackSecret)
	if cfg.Client == nil {
		cfg.Client = NewClient(ClientConfig{ConnectTimeout: w.ConnectTimeout, Timeout: w.Timeout, AllowPrivate: w.AllowPrivate})
	}
	return cfg
}

// SendResult says what one RunOnce did.
type SendResult struct {
	Attempts  int
	Delivered int
	GivenUp   int
	// Disabled are the endpoints it disabled.
	Disabled []string
}

// Sender is the leader loop that posts due deliveries and records their attempts (the
// package's comment). An endpoint that fails backs off as a whole: none of its deliveries is
// sent before its retry_at, and then one at a time until one succeeds.
type Sender struct {
	startstop.Base
	st  Store
	cfg SenderConfig
	log *slog.Logger
}

// NewSender returns a Sender over st.
func NewSender(st Store, cfg SenderConfig) *Sender {
	cfg.Interval = cmp.Or(cfg.Interval, config.WebhooksIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, config.WebhooksBatchDefault)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, config.WebhooksConcurrencyDefault)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, config.WebhooksMaxAttemptsDefault)
	cfg.MaxFailures = cmp.Or(cfg.MaxFailures, config.WebhooksMaxConsecutiveFailuresDefault)
	if cfg.Backoff == (config.Backoff{}) {
		cfg.Backoff = config.Backoff{Initial: config.WebhooksBackoffInitialDefault, Multiplier: config.BackoffMultiplierDefault,
			Max: config.WebhooksBackoffMaxDefault, Jitter: config.BackoffJitterDefault}
	}
	if cfg.Client == nil {
		cfg.Client = NewClient(ClientConfig{ConnectTimeout: config.WebhooksConnectTimeoutDefault, Timeout: config.WebhooksTimeoutDefault})
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Sender{st: st, cfg: cfg, log: logging.Component(cfg.Logger, "webhook-sender")}
}

// Start runs the sender until ctx ends or Stop is called. It returns at once.
func (s *Sender) Start(ctx context.Context) error {
	return s.StartLoop(ctx, startstop.Every(s.cfg.Interval, s.cfg.Stagger, s.cfg.Wake, s.log), startstop.Pass(s.RunOnce))
}

// RunOnce sends the due deliveries, batch after batch while batches come full (at most
// sendRounds of them).
func (s *Sender) RunOnce(ctx context.Context) (SendResult, error) {
	var total SendResult
	for range sendRounds {
		res, full, err := s.pass(ctx)
		total.Attempts, total.Delivered, total.GivenUp = total.Attempts+res.Attempts, total.Delivered+res.Delivered,
			total.GivenUp+res.GivenUp
		total.Disabled = append(total.Disabled, res.Disabled...)
		if err != nil || !full {
			return total, err
		}
	}
	return total, nil
}

// sent is one attempt's outcome.
type sent struct {
	d      store.WebhookDelivery
	a      answer
	result string // the attempts_total result
	at     time.Time
	done   time.Time // when the answer came: the order the endpoint's failures count in
}

// pass takes one batch of due deliveries, sends them and records the attempts.
func (s *Sender) pass(ctx context.Context) (SendResult, bool, error) {
	now := s.cfg.Clock().UTC()
	due, err := s.st.WebhookDeliveriesDue(ctx, now, s.cfg.Batch)
	if err != nil || len(due) == 0 {
		return SendResult{}, false, err
	}
	full := len(due) == s.cfg.Batch
	subs, err := s.subscriptions(ctx)
	if err != nil {
		return SendResult{}, false, err
	}
	// An endpoint that is failing gets one delivery, a probe, until one succeeds.
	probing := map[string]bool{}
	due = slices.DeleteFunc(due, func(d store.WebhookDelivery) bool {
		if d.SubscriptionID == store.DeliveryCallback {
			return false
		}
		sub, ok := subs[d.SubscriptionID]
		if !ok || sub.Status != store.WebhookActive {
			return true
		}
		if sub.ConsecutiveFailures == 0 {
			return false
		}
		skip := probing[sub.ID]
		probing[sub.ID] = true
		return skip
	})
	outcomes := s.sendAll(ctx, due, subs, now)
	res, err := s.record(ctx, outcomes, subs, now)
	return res, full, err
}

// subscriptions reads every subscription, by id.
func (s *Sender) subscriptions(ctx context.Context) (map[string]store.WebhookSubscription, error) {
	list, err := s.st.WebhookList(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]store.WebhookSubscription, len(list))
	for _, sub := range list {
		out[sub.ID] = sub
	}
	return out, nil
}

// sendAll sends ds, Concurrency at a time, and returns their outcomes in the order their
// answers came.
func (s *Sender) sendAll(ctx context.Context, ds []store.WebhookDelivery, subs map[string]store.WebhookSubscription,
	now time.Time) []sent {
	var (
		mu   sync.Mutex
		out  = make([]sent, 0, len(ds))
		wg   sync.WaitGroup
		sema = make(chan struct{}, s.cfg.Concurrency)
	)
	for _, d := range ds {
		sema <- struct{}{}
		wg.Go(func() {
			defer func() { <-sema }()
			o := s.send(ctx, d, subs[d.SubscriptionID].Secret, now)
			o.done = time.Now()
			mu.Lock()
			out = append(out, o)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortStableFunc(out, func(a, b sent) int { return a.done.Compare(b.done) })
	return out
}

// send makes one attempt of d, signed with secret (a subscription's) or d's agent's callback
// secret.
func (s *Sender) send(ctx context.Context, d store.WebhookDelivery, secret string, now time.Time) sent {
	o := sent{d: d, at: now}
	if d.SubscriptionID == store.DeliveryCallback {
		secret = CallbackSecret(s.cfg.CallbackSecret, d.Agent)
		if secret == "" {
			o.a, o.result = answer{err: errors.New("webhooks.callback_secret is not set: the callback cannot be signed")}, resultUnsigned
			return o
		}
	}
	o.a = post(ctx, s.cfg.Client, call{url: d.URL, secret: secret, key: d.IdempotencyKey, event: d.EventType,
		body: d.Body, now: s.cfg.Clock()})
	switch {
	case o.a.ok():
		o.result = resultOK
	case hookurl.IsBlocked(o.a.err):
		o.result = resultBlocked
	case o.a.err != nil:
		o.result = resultError
	default:
		o.result = resultHTTPError
	}
	return o
}

// record writes the outcomes in one fenced transaction: each delivery's new state and attempt
// row, each endpoint's failures and backoff, and the endpoints disabled (with a
// webhook.disabled audit row each, which the tail turns into an event for the others).
func (s *Sender) record(ctx context.Context, outcomes []sent, subs map[string]store.WebhookSubscription,
	now time.Time) (SendResult, error) {
	var (
		res      = SendResult{Attempts: len(outcomes)}
		records  = make([]store.DeliveryRecord, 0, len(outcomes))
		finals   = make([]string, len(outcomes))
		states   = map[string]*store.WebhookState{}
		order    []string
		disabled []store.AuditEvent
	)
	for i, o := range outcomes {
		r := store.DeliveryRecord{ID: o.d.ID, ExpectAttempts: o.d.Attempts, Status: store.DeliveryPending, Now: now,
			Attempt: store.WebhookAttempt{StatusCode: o.a.status, Error: o.a.problem(), StartedAt: o.at, Duration: o.a.took}}
		attempts := o.d.Attempts + 1
		switch {
		case o.a.ok():
			r.Status, r.NextAttemptAt, finals[i] = store.DeliveryDelivered, now, finalDelivered
			res.Delivered++
		case attempts >= s.cfg.MaxAttempts:
			r.Status, r.NextAttemptAt, finals[i] = store.DeliveryFailed, now, finalGivenUp
			res.GivenUp++
		default:
			r.NextAttemptAt = now.Add(engine.RetryDelay(s.cfg.Backoff, attempts, s.cfg.Rand)).Truncate(time.Microsecond)
		}
		records = append(records, r)
		sub, ok := subs[o.d.SubscriptionID]
		if o.d.SubscriptionID == store.DeliveryCallback || !ok {
			continue
		}
		st := states[sub.ID]
		if st == nil {
			st = &store.WebhookState{From: store.WebhookActive, Status: store.WebhookActive,
				ConsecutiveFailures: sub.ConsecutiveFailures, Now: now}
			states[sub.ID] = st
			order = append(order, sub.ID)
		}
		if st.Status == store.WebhookDisabled {
			continue
		}
		if o.a.ok() {
			st.ConsecutiveFailures, st.RetryAt = 0, time.Time{}
			continue
		}
		st.ConsecutiveFailures++
		st.RetryAt = now.Add(engine.RetryDelay(s.cfg.Backoff, st.ConsecutiveFailures, s.cfg.Rand)).Truncate(time.Microsecond)
		if st.ConsecutiveFailures >= s.cfg.MaxFailures {
			at := now
			st.Status, st.RetryAt, st.DisabledAt = store.WebhookDisabled, time.Time{}, &at
			st.DisabledReason = fmt.Sprintf("%d failed attempts in a row; the last: %s", st.ConsecutiveFailures, o.a.problem())
			details, _ := json.Marshal(map[string]any{"webhook_id": sub.ID, "consecutive_failures": st.ConsecutiveFailures,
				"last_error": o.a.problem(), "last_status_code": o.a.status})
			disabled = append(disabled, store.AuditEvent{TS: now, EventType: AuditDisabled, Actor: leaderActor, Details: details})
		}
	}
	err := store.WithFence(ctx, s.st, s.cfg.Fence, func(tx store.Tx) error {
		if _, err := tx.WebhookDeliveryRecord(ctx, records); err != nil {
			return err
		}
		for _, id := range order {
			// Guarded by the status read: an admin who disabled or deleted it meanwhile wins.
			if err := tx.WebhookSetState(ctx, id, *states[id]); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		if len(disabled) == 0 {
			return nil
		}
		return tx.AuditInsert(ctx, disabled)
	})
	if err != nil {
		return SendResult{}, fmt.Errorf("record webhook attempts: %w", err)
	}
	for i, o := range outcomes {
		s.cfg.Metrics.attempted(kindOf(o.d), o.result, finals[i], now.Sub(o.d.EventAt).Seconds())
		if finals[i] == finalGivenUp {
			s.log.Warn("gave a webhook delivery up", "delivery_id", o.d.ID, "webhook_id", o.d.SubscriptionID,
				"job_id", o.d.JobID, "event", o.d.EventType, "attempts", o.d.Attempts+1, "error", o.a.problem())
		}
	}
	for _, id := range order {
		if st := states[id]; st.Status == store.WebhookDisabled {
			res.Disabled = append(res.Disabled, id)
			s.cfg.Metrics.endpointDisabled()
			s.log.Warn("disabled a webhook endpoint that kept failing", "webhook_id", id,
				"consecutive_failures", st.ConsecutiveFailures, "reason", st.DisabledReason)
		}
	}
	return res, nil
}

// kindOf is the metrics kind of d.
func kindOf(d store.WebhookDelivery) string {
	if d.SubscriptionID == store.DeliveryCallback {
		return kindCallback
	}
	return kindSubscription
}

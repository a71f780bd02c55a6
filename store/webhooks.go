package store

import (
	"context"
	"encoding/json"
	"time"
)

// WebhookStatus is the state of a webhook subscription.
type WebhookStatus string

// Webhook subscription states.
const (
	// WebhookActive: its events are queued and sent.
	WebhookActive WebhookStatus = "active"
	// WebhookDisabled: no new event is queued for it and nothing is sent to it; an admin
	// disabled it or it failed too many times in a row (webhooks.max_consecutive_failures).
	WebhookDisabled WebhookStatus = "disabled"
)

// WebhookStatuses lists the subscription states.
var WebhookStatuses = []WebhookStatus{WebhookActive, WebhookDisabled}

// WebhookSubscription is one row of webhook_subscriptions: an endpoint an admin subscribed to
// some events.
type WebhookSubscription struct {
	ID  string
	URL string
	// Events are the event names it receives (webhooks.Events).
	Events []string
	// FilterType and FilterAgent keep only the events of jobs of that type and agent ("": any).
	FilterType, FilterAgent string
	// Secret is the HMAC-SHA256 key that signs its deliveries.
	Secret string
	Status WebhookStatus
	// ConsecutiveFailures counts the failed attempts since the last success.
	ConsecutiveFailures int
	// RetryAt is when the failing endpoint may be tried again (zero: it is not backing off).
	RetryAt        time.Time
	DisabledReason string
	DisabledAt     *time.Time
	CreatedBy      string
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// WebhookState is the delivery state of a subscription, written as a whole by
// WebhookSetState.
type WebhookState struct {
	// From, when set, guards the write: it applies only while the row's status is still From
	// (ErrNotFound otherwise).
	From                WebhookStatus
	Status              WebhookStatus
	ConsecutiveFailures int
	RetryAt             time.Time // zero: none
	// DisabledReason and DisabledAt are kept from the row when DisabledAt is nil.
	DisabledReason string
	DisabledAt     *time.Time
	Now            time.Time
}

// DeliveryStatus is the state of a webhook delivery.
type DeliveryStatus string

// Delivery states.
const (
	DeliveryPending   DeliveryStatus = "pending"
	DeliveryDelivered DeliveryStatus = "delivered"
	// DeliveryFailed: given up after webhooks.max_attempts attempts.
	DeliveryFailed DeliveryStatus = "failed"
)

// DeliveryCallback is the subscription id of a job's own callback: no subscription.
const DeliveryCallback = ""

// WebhookDelivery is one row of webhook_deliveries: one event for one endpoint.
type WebhookDelivery struct {
	ID int64
	// SubscriptionID is the subscription, DeliveryCallback ("") for a job's callback_url.
	SubscriptionID string
	URL            string
	// Agent is the event's job's agent ("" for none): a callback is signed with its secret.
	Agent     string
	EventID   int64 // the orchestrator_audit id
	EventType string
	EventAt   time.Time
	JobID     string
	// IdempotencyKey is sent on every attempt; unique over all deliveries.
	IdempotencyKey string
	Body           json.RawMessage
	Status         DeliveryStatus
	Attempts       int
	NextAttemptAt  time.Time
	LastStatusCode int
	LastError      string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	FinishedAt     *time.Time
}

// WebhookAttempt is one row of webhook_attempts: one try of a delivery.
type WebhookAttempt struct {
	DeliveryID int64
	Attempt    int
	StatusCode int // 0: no HTTP answer
	Error      string
	StartedAt  time.Time
	Duration   time.Duration
}

// DeliveryRecord is the outcome of one attempt, written by WebhookDeliveryRecord: the
// delivery's new state and the attempt's row.
type DeliveryRecord struct {
	ID int64
	// ExpectAttempts is the delivery's attempts before this one: the record applies only while
	// the row is still pending with that count.
	ExpectAttempts int
	Status         DeliveryStatus
	NextAttemptAt  time.Time
	Attempt        WebhookAttempt
	Now            time.Time
}

// DeliveryListParams page a subscription's deliveries, newest first (id descending). BeforeID
// is the keyset cursor: the last id of the previous page (0: from the newest).
type DeliveryListParams struct {
	SubscriptionID string
	BeforeID       int64
	Limit          int
}

// WebhookCursor is the row of webhook_cursor: the webhook tail's position in orchestrator_audit.
// Every id up to LastID has been read except Gaps, ids that were missing when a higher one was
// read and may still commit.
type WebhookCursor struct {
	LastID  int64
	Gaps    []WebhookGap
	Version int64 // bumped by every write (compare-and-set)
}

// WebhookGap is an audit id missing below the cursor, and when it was first found missing.
type WebhookGap struct {
	ID        int64     `json:"id"`
	FirstSeen time.Time `json:"first_seen"`
}

// WebhookJob is what an event's delivery says of its job.
type WebhookJob struct {
	ID, Type, Agent string
	Status          JobStatus
	Attempts        int
	MaxAttempts     int
	CallbackURL     string
	LastError       string
	// Result is the job's result when it is at most the size asked (nil otherwise);
	// ResultBytes its size.
	Result      json.RawMessage
	ResultBytes int
}

// WebhookExecutor is the operations on the webhook tables (docs/architecture.md, "Webhooks").
type WebhookExecutor interface {
	// WebhookInsert inserts a subscription; a taken id is ErrConflict.
	WebhookInsert(ctx context.Context, s WebhookSubscription) error
	// WebhookGet returns one subscription or ErrNotFound.
	WebhookGet(ctx context.Context, id string) (WebhookSubscription, error)
	// WebhookList returns every subscription, by id.
	WebhookList(ctx context.Context) ([]WebhookSubscription, error)
	// WebhookDelete deletes a subscription with its deliveries and their attempts; ErrNotFound
	// when it does not exist.
	WebhookDelete(ctx context.Context, id string) error
	// WebhookSetState writes a subscription's delivery state; ErrNotFound when it does not
	// exist, or its status is no longer s.From.
	WebhookSetState(ctx context.Context, id string, s WebhookState) error

	// WebhookCursorGet reads the tail's cursor.
	WebhookCursorGet(ctx context.Context) (WebhookCursor, error)
	// WebhookCursorSet writes c (its Version is ignored) while the stored version is still
	// expect, and bumps the version; ErrConflict otherwise.
	WebhookCursorSet(ctx context.Context, c WebhookCursor, expect int64, now time.Time) error
	// AuditGetMany returns the audit rows among ids that exist, by id.
	AuditGetMany(ctx context.Context, ids []int64) ([]AuditEvent, error)
	// WebhookJobs returns what deliveries say of the jobs among ids that exist, their results
	// up to resultMax bytes.
	WebhookJobs(ctx context.Context, ids []string, resultMax int) ([]WebhookJob, error)

	// WebhookDeliveryInsert queues deliveries (pending, due at NextAttemptAt); one whose
	// idempotency key exists already is left as it is.
	WebhookDeliveryInsert(ctx context.Context, ds []WebhookDelivery) error
	// WebhookDeliveriesDue returns up to limit pending deliveries due at now, oldest due first:
	// callbacks, and those of active subscriptions that are not backing off.
	WebhookDeliveriesDue(ctx context.Context, now time.Time, limit int) ([]WebhookDelivery, error)
	// WebhookDeliveryRecord writes the outcome of attempts: each delivery's new state, with
	// its attempts count, last status code and error, and the attempt's row. A record whose
	// delivery is gone or moved on (no longer pending at ExpectAttempts) is skipped; it returns
	// the ids it wrote.
	WebhookDeliveryRecord(ctx context.Context, rs []DeliveryRecord) ([]int64, error)
	// WebhookDeliveryGet returns one delivery or ErrNotFound.
	WebhookDeliveryGet(ctx context.Context, id int64) (WebhookDelivery, error)
	// WebhookDeliveryList returns a page of a subscription's deliveries, newest first.
	WebhookDeliveryList(ctx context.Context, p DeliveryListParams) ([]WebhookDelivery, error)
	// WebhookAttemptList returns the attempts of the deliveries among ids, by delivery and
	// attempt.
	WebhookAttemptList(ctx context.Context, ids []int64) ([]WebhookAttempt, error)
	// WebhookDeliveryCounts counts the pending deliveries of each subscription (callbacks
	// under DeliveryCallback).
	WebhookDeliveryCounts(ctx context.Context) (map[string]int, error)
	// WebhookDeleteFinished deletes up to limit deliveries (with their attempts) that were
	// delivered or given up before before, and returns how many it deleted.
	WebhookDeleteFinished(ctx context.Context, before time.Time, limit int) (int, error)
}

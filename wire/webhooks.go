package wire

import (
	"encoding/json"
	"time"
)

// Headers of every webhook delivery, callback and pre-run call (docs/security.md, "Webhooks").
const (
	// HeaderIdempotencyKey is the same on every attempt of one delivery: a receiver that saw
	// it already has the event.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderTimestamp is the Unix time the attempt was signed at.
	HeaderTimestamp = "X-Orchestrator-Timestamp"
	// HeaderSignature is "t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">".
	HeaderSignature = "X-Orchestrator-Signature"
	// HeaderEvent is the event's type (job.done, …).
	HeaderEvent = "X-Orchestrator-Event"
)

// WebhookEvent is the body of every delivery: an event of the cluster.
type WebhookEvent struct {
	// ID names the event ("evt_<audit id>"); an event sent to several endpoints has one id.
	ID string `json:"id"`
	// Type is the event's name: job.done, job.failed, schedule.skipped, … (docs).
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	// Data is WebhookJobData for the job.* events, the audit row's details for the others.
	Data json.RawMessage `json:"data"`
}

// WebhookJobData is the data of a job.* event, and of a pre-run call (job.pre_run).
type WebhookJobData struct {
	JobID string `json:"job_id"`
	Type  string `json:"type,omitempty"`
	Agent string `json:"agent,omitempty"`
	// Status is the job's status right after the event (pending for a failed attempt that
	// will be retried).
	Status      string `json:"status,omitempty"`
	Attempt     int    `json:"attempt,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	// Error is the failed attempt's error (job.failed, job.dead_letter).
	Error string `json:"error,omitempty"`
	// Result is a done job's result, when it fits webhooks.max_body_bytes; ResultOmitted
	// says it did not (GET /jobs/{id} has it).
	Result        json.RawMessage `json:"result,omitempty"`
	ResultOmitted bool            `json:"result_omitted,omitempty"`
	// Payload is the job's payload in a pre-run call, when it fits; PayloadOmitted says it did
	// not.
	Payload        json.RawMessage `json:"payload,omitempty"`
	PayloadOmitted bool            `json:"payload_omitted,omitempty"`
	// Actor is who caused the event (agent:NAME, worker:ID, leader, admin:…).
	Actor string `json:"actor,omitempty"`
	// Details are the details of the audit row the event comes from.
	Details json.RawMessage `json:"details,omitempty"`
}

// WebhookFilter keeps only the events of jobs of one type and/or agent.
type WebhookFilter struct {
	Type  string `json:"type,omitempty"`
	Agent string `json:"agent,omitempty"`
}

// WebhookRequest is the body of POST /webhooks.
type WebhookRequest struct {
	// URL is the http(s) endpoint (no private address unless webhooks.allow_private).
	URL string `json:"url"`
	// Events are the event names to receive (1 to all of them, each once).
	Events []string       `json:"events"`
	Filter *WebhookFilter `json:"filter,omitempty"`
}

// Webhook is a subscription as the API shows it.
type Webhook struct {
	ID     string         `json:"id"`
	URL    string         `json:"url"`
	Events []string       `json:"events"`
	Filter *WebhookFilter `json:"filter,omitempty"`
	// Status is active or disabled.
	Status string `json:"status"`
	// ConsecutiveFailures counts the failed attempts since the last success; RetryAt is when
	// a failing endpoint is tried again.
	ConsecutiveFailures int        `json:"consecutive_failures"`
	RetryAt             *time.Time `json:"retry_at,omitempty"`
	// DisabledReason and DisabledAt say why and when it was last disabled.
	DisabledReason string     `json:"disabled_reason,omitempty"`
	DisabledAt     *time.Time `json:"disabled_at,omitempty"`
	// PendingDeliveries counts its deliveries not yet delivered nor given up.
	PendingDeliveries int       `json:"pending_deliveries"`
	CreatedBy         string    `json:"created_by,omitempty"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
	// Secret is the key of its signatures: in the answer to its creation only.
	Secret string `json:"secret,omitempty"`
}

// WebhookList is the answer of GET /webhooks.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
}

// WebhookDelivery is one event for one endpoint, with its attempts.
type WebhookDelivery struct {
	ID             int64  `json:"id"`
	EventID        string `json:"event_id"`
	EventType      string `json:"event_type"`
	JobID          string `json:"job_id,omitempty"`
	IdempotencyKey string `json:"idempotency_key"`
	// Status is pending, delivered or failed (given up).
	Status         string `json:"status"`
	Attempts       int    `json:"attempts"`
	LastStatusCode int    `json:"last_status_code,omitempty"`
	LastError      string `json:"last_error,omitempty"`
	// NextAttemptAt is set while it is pending.
	NextAttemptAt *time.Time       `json:"next_attempt_at,omitempty"`
	CreatedAt     time.Time        `json:"created_at"`
	FinishedAt    *time.Time       `json:"finished_at,omitempty"`
	History       []WebhookAttempt `json:"history"`
}

// WebhookAttempt is one attempt of a delivery.
type WebhookAttempt struct {
	Attempt int `json:"attempt"`
	// StatusCode is the answer's HTTP status, 0 when there was none.
	StatusCode int       `json:"status_code,omitempty"`
	Error      string    `json:"error,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	DurationMS float64   `json:"duration_ms"`
}

// WebhookDeliveryList is a page of GET /webhooks/{id}/deliveries, newest first. NextCursor is
// empty on the last page.
type WebhookDeliveryList struct {
	Deliveries []WebhookDelivery `json:"deliveries"`
	NextCursor string            `json:"next_cursor,omitempty"`
}

// CallbackSecret is the answer of GET /webhooks/callback_secret: the key an agent's job
// callbacks are signed with.
type CallbackSecret struct {
	Agent  string `json:"agent"`
	Secret string `json:"secret"`
}

// PreRunRequest is the body of POST /internal/jobs/pre_run: a worker asks whether the job it
// claimed may start.
type PreRunRequest struct {
	WorkerID   string `json:"worker_id"`
	JobID      string `json:"job_id"`
	Attempt    int    `json:"attempt"`
	LeaseToken string `json:"lease_token"`
}

// Pre-run decisions (PreRunResponse.Decision).
const (
	// PreRunRun: the hook answered 2xx, or the type has none: run the handler.
	PreRunRun = "run"
	// PreRunFail: the hook answered 4xx: fail the attempt for good (non-retryable) with
	// Message as its error, without running the handler.
	PreRunFail = "fail"
	// PreRunRetry: the hook answered 5xx, timed out or could not be reached: fail the attempt
	// so that it is retried with the type's backoff.
	PreRunRetry = "retry"
)

// PreRunResponse is the answer of POST /internal/jobs/pre_run.
type PreRunResponse struct {
	Decision string `json:"decision"`
	Message  string `json:"message,omitempty"`
	// StatusCode is the hook's HTTP status (0: no hook, or no answer).
	StatusCode int `json:"status_code,omitempty"`
}

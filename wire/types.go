// Package wire holds the types and constants of the orchestrator's HTTP API as they travel in
// JSON: the bodies of requests and answers, the error body, the refusal reasons, outcomes and
// states they carry. The API server, the worker and the client SDK share them; it imports
// nothing but the standard library, so any of them may depend on it. It is not internal: the
// SDK's users name these types too (the client package re-exports them as aliases).
package wire

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Duration is a JSON duration: a number of seconds (30, 0.5) or a Go duration string ("1m30s").
// It marshals as seconds.
type Duration time.Duration

// UnmarshalJSON accepts seconds or a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("want seconds or a duration like \"90s\": %w", err)
		}
		*d = Duration(v)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("want seconds or a duration like \"90s\"")
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

// MarshalJSON writes seconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.FormatFloat(time.Duration(d).Seconds(), 'f', -1, 64)), nil
}

// SubmitRequest is the body of POST /jobs/submit.
type SubmitRequest struct {
	// JobID is a client-chosen stable id ([A-Za-z0-9._:-]{1,128}); resubmitting it returns the
	// existing job. Generated when empty.
	JobID string `json:"job_id,omitempty"`
	Type  string `json:"type"`
	Agent string `json:"agent"`
	// Payload is any JSON value, handed to the handler as is.
	Payload json.RawMessage `json:"payload"`
	// MaxAttempts overrides the type's attempt budget.
	MaxAttempts *int `json:"max_attempts,omitempty"`
	// Timeout overrides the type's per-attempt run-time limit.
	Timeout *Duration `json:"timeout,omitempty"`
	// Resources override what the type asks of the GPUs.
	Resources *Resources `json:"resources,omitempty"`
	// Priority overrides the type's priority, 0..9: higher first among the GPU jobs a worker
	// waits to place.
	Priority *int `json:"priority,omitempty"`
	// Constraints narrow the nodes the job may be placed on.
	Constraints *Constraints `json:"constraints,omitempty"`
	// PoolID routes the job to the workers of one pool; ModelID to the workers of a pool
	// serving the model.
	PoolID  string `json:"pool_id,omitempty"`
	ModelID string `json:"model_id,omitempty"`
	// CallbackURL is where the job's terminal event (job.done, job.dead_letter,
	// job.cancelled) is POSTed, signed with the agent's callback secret.
	CallbackURL string `json:"callback_url,omitempty"`
	// DependsOn are jobs of the same agent this one waits for (at most 64): it is waiting
	// until every one has ended done, then pending. A parent that ends dead_letter or
	// cancelled cancels it, unless OnParentFailure is run.
	DependsOn []string `json:"depends_on,omitempty"`
	// OnParentFailure is cancel (the default) or run: run the job once every parent has
	// ended, however they ended.
	OnParentFailure string `json:"on_parent_failure,omitempty"`
	// FanOut runs the job once on each node of a group: one child job per node (id
	// "<job_id>.<node>"), and this job as their parent, which never runs itself and ends once
	// every child has (done with their results by node, or failed as the strategy says).
	FanOut *FanOut `json:"fan_out,omitempty"`
}

// Constraints narrow the nodes a job may be placed on; every rule given must hold.
type Constraints struct {
	// NodeSelector: the node has each of these labels with this value (at most 16).
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// AllowNodes: only these nodes (at most 64 ids).
	AllowNodes []string `json:"allow_nodes,omitempty"`
	// DenyNodes: never these nodes (at most 64 ids).
	DenyNodes []string `json:"deny_nodes,omitempty"`
	// MaxPerNode: at most this many jobs of the job's type and agent run or are placed on one
	// node at once (1..1000; absent: no limit).
	MaxPerNode int `json:"max_per_node,omitempty"`
}

// Resources are what a job asks of the GPUs of one node. In a submit, a field left out takes
// the type's default (job_types.<type>.gpu_memory_mb on one shared GPU).
type Resources struct {
	// GPUMemoryMB is the memory needed on each GPU, in MB (1..4194304); 0 or absent: the type's.
	GPUMemoryMB int `json:"gpu_memory_mb,omitempty"`
	// GPUs is how many distinct GPUs of one node the job needs (1..8); absent: 1.
	GPUs int `json:"gpus,omitempty"`
	// Exclusive asks for GPUs that nothing else is placed on while the job holds them.
	Exclusive bool `json:"exclusive,omitempty"`
}

// SubmitResponse is the answer to a submit: 202 for a new job, 200 for an existing job_id.
type SubmitResponse struct {
	JobID   string `json:"job_id"`
	Status  string `json:"status"`
	Created bool   `json:"created"`
	// Type and RoutedFrom are set when admission routed the job to its type's CPU fallback
	// (the requested type's queue was full): Type is where the job went, RoutedFrom what was asked.
	Type       string `json:"type,omitempty"`
	RoutedFrom string `json:"routed_from,omitempty"`
}

// SubmitBatchMax is the most jobs one POST /jobs/submit_batch takes.
const SubmitBatchMax = 1000

// SubmitBatchRequest is the body of POST /jobs/submit_batch: 1 to SubmitBatchMax jobs, each
// what POST /jobs/submit takes. The whole body is at most 32 MiB.
type SubmitBatchRequest struct {
	Jobs []SubmitRequest `json:"jobs"`
}

// SubmitBatchResponse answers a batch (always 200 once the request itself is well formed):
// one result per job, in the order of the request, and the counts of each kind.
type SubmitBatchResponse struct {
	Results []SubmitBatchResult `json:"results"`
	// Created counts new jobs, Existing job_ids that existed already (nothing written), and
	// Failed the jobs refused (Error set).
	Created  int `json:"created"`
	Existing int `json:"existing"`
	Failed   int `json:"failed"`
}

// SubmitBatchResult is what became of one job of a batch: what POST /jobs/submit would have
// answered for it alone. Either the job (JobID, Status, Created and, when admission routed it
// to a CPU fallback, Type and RoutedFrom), or Error.
type SubmitBatchResult struct {
	// JobID is the job's id; for a failed job, the job_id it was sent with (empty if none).
	JobID string `json:"job_id,omitempty"`
	// Status is the job's status: pending for a new job, the existing job's for a repeat.
	Status  string `json:"status,omitempty"`
	Created bool   `json:"created"`
	// Type and RoutedFrom: as in SubmitResponse.
	Type       string `json:"type,omitempty"`
	RoutedFrom string `json:"routed_from,omitempty"`
	// Error is why the job was refused (nothing written for it), with the code, message and
	// field the same submit alone would have been answered with.
	Error *ErrorDetail `json:"error,omitempty"`
	// RetryAfterMS is set when admission control refused the job: when it may be admitted.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// Job is a job as the API shows it.
type Job struct {
	JobID       string          `json:"job_id"`
	Type        string          `json:"type"`
	Agent       string          `json:"agent"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Status      string          `json:"status"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	AvailableAt time.Time       `json:"available_at"`
	Enqueued    bool            `json:"enqueued"`
	StreamID    string          `json:"stream_id,omitempty"`
	OwnerPool   string          `json:"owner_pool,omitempty"`
	WorkerID    string          `json:"worker_id,omitempty"`
	GPUMemoryMB int             `json:"gpu_memory_mb"`
	// GPUs and GPUExclusive: the job's GPUs of one node (0 for a CPU job), and whether it holds
	// them alone; GPUMemoryMB is needed on each.
	GPUs         int  `json:"gpus,omitempty"`
	GPUExclusive bool `json:"gpu_exclusive,omitempty"`
	// WaitingReason is why a pending GPU job was last refused a place, as "<code>: <message>"
	// ("no_capacity: needs 30000 MB on 1 GPU(s) of one node; the most free is 20557 MB on
	// vm/0"); absent when none, and once the job is no longer pending.
	WaitingReason string `json:"waiting_reason,omitempty"`
	// PlacedNode is the node the scheduler placed a pending GPU job on: its GPUs are reserved
	// there and it waits for a worker of that node to claim it. Absent when the job is not
	// placed, and once it is claimed (WorkerID then names its worker).
	PlacedNode string `json:"placed_node,omitempty"`
	// PlacedPool is the pool whose workers alone may claim the placed job there (a job routed
	// by pool_id or model_id).
	PlacedPool string `json:"placed_pool,omitempty"`
	// PoolID and ModelID are the job's route, as submitted.
	PoolID  string `json:"pool_id,omitempty"`
	ModelID string `json:"model_id,omitempty"`
	// Constraints are the job's placement constraints, as submitted.
	Constraints *Constraints    `json:"constraints,omitempty"`
	Priority    int             `json:"priority"`
	Timeout     Duration        `json:"timeout"`
	Result      json.RawMessage `json:"result,omitempty"`
	LastError   string          `json:"last_error,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	StartedAt   *time.Time      `json:"started_at,omitempty"`
	FinishedAt  *time.Time      `json:"finished_at,omitempty"`

	// CallbackURL is the job's callback, as submitted.
	CallbackURL string `json:"callback_url,omitempty"`
	// DependsOn are the jobs this one waits for (depends_on, a workflow step's needs), shown
	// by GET /jobs/{id}.
	DependsOn []string `json:"depends_on,omitempty"`
	// FanOutChildren are a fan-out parent's children by node, shown by GET /jobs/{id}.
	FanOutChildren map[string]string `json:"fan_out_children,omitempty"`
}

// JobList is a page of GET /jobs. NextCursor is empty on the last page.
type JobList struct {
	Jobs       []Job  `json:"jobs"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// ClaimItem is one stream entry a worker read and wants to run.
type ClaimItem struct {
	JobID     string `json:"job_id"`
	Stream    string `json:"stream"`
	MessageID string `json:"message_id"`
	// TraceParent is the W3C trace context the stream entry carried, so the orchestrator's
	// claim span joins the job's trace.
	TraceParent string `json:"traceparent,omitempty"`
}

// ClaimRequest is the body of POST /internal/jobs/claim.
type ClaimRequest struct {
	WorkerID string      `json:"worker_id"`
	PoolID   string      `json:"pool_id,omitempty"`
	NodeID   string      `json:"node_id,omitempty"`
	Jobs     []ClaimItem `json:"jobs"`
	// Results are attempts that ended, recorded before the claim in the same transaction (the
	// answer's Outcomes): a worker reports what finished and takes what is next in one call.
	// Each result is checked as POST /internal/jobs/complete checks it.
	Results []JobResult `json:"results,omitempty"`
	// InFlight are the jobs the worker is running; the answer says which of them were cancelled.
	InFlight []string `json:"in_flight,omitempty"`
}

// ClaimedJob is what a worker needs to run one claimed job.
type ClaimedJob struct {
	JobID      string          `json:"job_id"`
	Type       string          `json:"type"`
	Payload    json.RawMessage `json:"payload"`
	Attempt    int             `json:"attempt"`
	Timeout    Duration        `json:"timeout"`
	LeaseToken string          `json:"lease_token,omitempty"`
	GPUIndex   *int            `json:"gpu_index,omitempty"`
	// GPUIndexes are all the GPUs of the lease, GPUIndex first (several for a job that asked
	// for more than one); CUDA_VISIBLE_DEVICES lists them.
	GPUIndexes []int `json:"gpu_indexes,omitempty"`
	// GPUMemoryMB is what the gpu lease reserves on each of its GPUs.
	GPUMemoryMB int64 `json:"gpu_memory_mb,omitempty"`
	// LeaseTTL is the lease's time to live: the worker renews it every third of it.
	LeaseTTL Duration `json:"lease_ttl,omitempty"`
	// LeaseExpiresAt is when the lease expires unless renewed.
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	// Parents are how the job's parents ended, with their results (a job with depends_on or a
	// workflow step with needs; absent otherwise), within the orchestrator's
	// flows.parent_results_max_bytes for all of them: a result that does not fit is left
	// out and Truncated set.
	Parents []Parent `json:"parents,omitempty"`
}

// Parent is one parent of a claimed job.
type Parent struct {
	JobID string `json:"job_id"`
	// Step is the parent's step name in a workflow.
	Step string `json:"step,omitempty"`
	// Status is how the parent ended: done, dead_letter, cancelled, or gone (deleted by
	// retention).
	Status    string          `json:"status"`
	Result    json.RawMessage `json:"result,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
}

// Claim refusal reasons. A refused entry is acknowledged and dropped by the worker, except for
// ReasonRetryLater, whose entry is left for later delivery.
const (
	ReasonNotFound   = "not_found"   // no such job
	ReasonNotPending = "not_pending" // claimed elsewhere, running, or terminal
	ReasonNotDue     = "not_due"     // pending but its backoff has not elapsed
	ReasonRetryLater = "retry_later" // no resources now (e.g. no GPU with room)
	// ReasonNotDelivered: the entry is neither the job's recorded entry nor one Redis
	// delivered to this worker (an invented or another consumer's entry).
	ReasonNotDelivered = "not_delivered"
	// ReasonOutOfScope: the job's type is outside the worker token's scope (--types).
	ReasonOutOfScope = "out_of_scope"
	// ReasonPlacedElsewhere: the scheduler placed the job on another node, or its placement
	// here has ended (the detail says which); the entry is stale.
	ReasonPlacedElsewhere = "placed_elsewhere"
)

// ClaimRefusal says why one entry was not claimed.
type ClaimRefusal struct {
	JobID  string `json:"job_id"`
	Reason string `json:"reason"`
	// Detail says why a retry_later: the lease denial (no_capacity, quota, node_unknown,
	// telemetry_stale).
	Detail string `json:"detail,omitempty"`
}

// ClaimResponse answers a claim.
type ClaimResponse struct {
	Claimed []ClaimedJob   `json:"claimed"`
	Refused []ClaimRefusal `json:"refused"`
	// Outcomes say what became of the request's Results, in their order. Unlike a completion,
	// a claim whose every result carries an expired lease is not refused as a whole: those
	// results are lease_expired here and the claim stands.
	Outcomes []CompleteOutcome `json:"outcomes,omitempty"`
	// Cancel lists in-flight jobs whose handlers must be cancelled.
	Cancel []string `json:"cancel,omitempty"`
}

// StartRequest is the body of POST /internal/jobs/start: the handlers of these jobs began.
type StartRequest struct {
	WorkerID string   `json:"worker_id"`
	JobIDs   []string `json:"job_ids"`
}

// StartResponse answers a start report.
type StartResponse struct {
	Cancel []string `json:"cancel,omitempty"`
}

// Result statuses of an attempt.
const (
	ResultDone   = "done"
	ResultFailed = "failed"
)

// JobResult is the outcome of one attempt.
type JobResult struct {
	JobID      string          `json:"job_id"`
	Attempt    int             `json:"attempt"`
	LeaseToken string          `json:"lease_token,omitempty"`
	Status     string          `json:"status"` // done | failed
	Result     json.RawMessage `json:"result,omitempty"`
	Error      string          `json:"error,omitempty"`
	// NonRetryable sends a failed job straight to the dead letters.
	NonRetryable bool `json:"non_retryable,omitempty"`
	// TraceParent is the W3C trace context of the worker's run span, so the orchestrator's
	// completion span joins the job's trace.
	TraceParent string `json:"traceparent,omitempty"`
	// ElapsedUS is the time from the handler's start to this report, in microseconds of the
	// worker's monotonic clock. A job that ends before its start report goes out has its start
	// recorded by the result, dated receipt − elapsed (no clock of the worker's is trusted).
	ElapsedUS int64 `json:"elapsed_us,omitempty"`
}

// CompleteRequest is the body of POST /internal/jobs/complete.
type CompleteRequest struct {
	WorkerID string      `json:"worker_id"`
	Results  []JobResult `json:"results"`
	InFlight []string    `json:"in_flight,omitempty"`
}

// Completion outcomes, per job.
const (
	OutcomeDone       = "done"        // recorded as done
	OutcomeRetry      = "retry"       // failed attempt recorded, the job will be retried
	OutcomeDeadLetter = "dead_letter" // failed attempt recorded, no attempts left
	OutcomeStale      = "stale"       // not recorded: the job is no longer this worker's attempt
	// OutcomeLeaseExpired: not recorded, because the attempt's lease expired (the worker went
	// quiet past its TTL) and the job was handed to another worker. Drop the result and ack.
	OutcomeLeaseExpired = "lease_expired"
)

// CompleteOutcome says what happened to one result.
type CompleteOutcome struct {
	JobID   string `json:"job_id"`
	Outcome string `json:"outcome"`
	Status  string `json:"status"` // the job's status after the call
}

// CompleteResponse answers a completion report.
type CompleteResponse struct {
	Outcomes []CompleteOutcome `json:"outcomes"`
	Cancel   []string          `json:"cancel,omitempty"`
}

// ErrorBody is every error answer: {"error": {"code": ..., "message": ..., "field": ...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes an error; Field names the offending input field of a 400.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// Health is the answer of /healthz and /readyz.
type Health struct {
	Status string            `json:"status"` // ok | unavailable
	Checks map[string]string `json:"checks,omitempty"`
}

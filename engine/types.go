package engine

import (
	"encoding/json"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// SubmitParams is one job to submit.
type SubmitParams struct {
	JobID       string // empty: generated
	Type        string
	Agent       string
	Payload     json.RawMessage
	MaxAttempts int           // 0: the type's default
	Timeout     time.Duration // 0: the type's default
	// Resources are what the job asks of the GPUs (nil: its type's; see Resources). Submit
	// fills it in with what the job gets.
	Resources *Resources
	// Priority is 0..MaxPriority (nil: the type's): higher first among the GPU jobs a worker
	// waits to place. Submit fills it in.
	Priority *int
	// Constraints narrow the nodes a GPU job may be placed on (nil: none). Submit checks them
	// and keeps them sorted, without duplicates.
	Constraints *store.Constraints
	// PoolID routes the job to the workers of one pool, ModelID to those of a pool serving
	// the model ("" for any): the scheduler places it.
	PoolID, ModelID string
	Actor           string // audit actor, e.g. "agent:NAME"
	// CallbackURL receives the job's terminal event ("" for none; checkCallback).
	CallbackURL string

	// DependsOn are jobs of the same agent this one waits for (at most MaxDependsOn): it is
	// inserted waiting and moves to pending once they have all ended done (flows.go).
	DependsOn []string
	// OnParentFailure is what a parent that ends dead_letter or cancelled does to the job:
	// OnParentFailureCancel ("" too) cancels it, OnParentFailureRun runs it anyway once every
	// parent has ended.
	OnParentFailure string
	// FanOut runs the job once on each node of a group (fanout.go): a parent that never runs
	// and one child per node.
	FanOut *FanOut

	// PayloadChecked says the caller decoded Payload from JSON already (the API's decoder
	// does), so Submit does not scan it once more to check it: with large payloads each scan
	// costs. Every other caller leaves it false.
	PayloadChecked bool
}

// ClaimItem is one stream entry a worker read.
type ClaimItem struct {
	JobID     string
	Stream    string
	MessageID string
}

// ClaimParams is one claim call of a worker.
type ClaimParams struct {
	WorkerID string
	PoolID   string
	NodeID   string
	Items    []ClaimItem
	// Results are attempts the worker finished, recorded in the claim's transaction before
	// anything is claimed, as a completion would record them: one round trip and one commit
	// for a worker's round of "report what ended, take what is next".
	Results  []Result
	InFlight []string // jobs the worker runs now; the result says which were cancelled
	// CheckEntries says the items come from a caller that must prove them (the API, for any
	// token): an item is claimed only for the job's recorded entry (its stream_id) or for an
	// entry of the job type's stream and group that is pending for the consumer WorkerID, that
	// is, one XREADGROUP delivered to it. Any other is refused as not_delivered, and the job's
	// stream_id is left alone. In-process callers (tests, tools) leave it false.
	CheckEntries bool
	// Types, when not nil, are the only job types the caller may claim (a scoped worker
	// token); a job of another type is refused as out_of_scope.
	Types []string
}

// Claim refusal reasons (the same strings as the wire's).
const (
	RefusedNotFound   = "not_found"
	RefusedNotPending = "not_pending"
	RefusedNotDue     = "not_due"
	RefusedRetryLater = "retry_later"
	// RefusedNotDelivered: the item names neither the job's entry nor an entry delivered to
	// the claiming consumer (ClaimParams.CheckEntries).
	RefusedNotDelivered = "not_delivered"
	// RefusedOutOfScope: the job's type is outside the caller's scope (ClaimParams.Types).
	RefusedOutOfScope = "out_of_scope"
	// RefusedPlacedElsewhere: the scheduler placed the job on another node than the
	// claiming worker's, or its placement lease has ended.
	RefusedPlacedElsewhere = "placed_elsewhere"
)

// Refusal says why a job was not claimed.
type Refusal struct {
	JobID  string
	Reason string
	// Detail says more about a retry_later: the lease denial's reason (no_capacity,
	// node_unknown, telemetry_stale).
	Detail string
}

// ClaimResult answers a claim: the claimed jobs (status claimed, attempts incremented), the
// refused ones, and the in-flight jobs to cancel.
type ClaimResult struct {
	Claimed []store.Job
	// Parents are the parents of the claimed jobs that have some (depends_on, workflow
	// steps), by job id, with their results within flows.parent_results_max_bytes.
	Parents map[string][]Parent
	// Leases are the leases of the claimed jobs, by job id.
	Leases  map[string]store.Lease
	Refused []Refusal
	// Outcomes say what became of ClaimParams.Results, in their order.
	Outcomes []Outcome
	Cancel   []string
}

// StartParams reports that the handlers of jobs began.
type StartParams struct {
	WorkerID string
	JobIDs   []string
}

// Result is the outcome of one attempt, as a worker reports it.
type Result struct {
	JobID        string
	Attempt      int
	LeaseToken   string
	Done         bool // false: failed
	Output       json.RawMessage
	Error        string
	NonRetryable bool
	// Elapsed is the time from the handler's start to the report, as the worker measured it
	// (0: unknown). It dates the start of a job whose start was not reported separately.
	Elapsed time.Duration
	// OutputChecked says the caller decoded Output from JSON already (the API's decoder does),
	// so recording it does not scan it once more, as SubmitParams.PayloadChecked for payloads.
	// Every other caller leaves it false: an Output that is not JSON is stored as null.
	OutputChecked bool
}

// CompleteParams is one completion report of a worker.
type CompleteParams struct {
	WorkerID string
	Results  []Result
	InFlight []string
}

// Completion outcomes (the same strings as the wire's).
const (
	OutcomeDone       = "done"
	OutcomeRetry      = "retry"
	OutcomeDeadLetter = "dead_letter"
	OutcomeStale      = "stale"
	// OutcomeLeaseExpired: not recorded, because the result carries a lease that expired: its
	// worker went quiet past the TTL and the job was rescued (or is about to be). A zombie
	// worker's late result must never overwrite the rescued job.
	OutcomeLeaseExpired = "lease_expired"
)

// Outcome says what a completion did to one job.
type Outcome struct {
	JobID   string
	Outcome string
	Status  store.JobStatus
}

// CompleteResult answers a completion report.
type CompleteResult struct {
	Outcomes []Outcome
	Cancel   []string
}

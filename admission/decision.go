package admission

import (
	"fmt"
	"time"
)

// Reason says why a decision went the way it did. It is the reason label of
// gpu_orchestrator_admission_decisions_total and, for a rejection, the error code the API
// answers with.
type Reason string

// Reasons of an admitted request.
const (
	// ReasonOK: every check passed.
	ReasonOK Reason = "ok"
	// ReasonExempt: the agent's policy is disabled; only the cluster-wide gates applied.
	ReasonExempt Reason = "exempt"
	// ReasonDisabled: admission control is off (admission.disabled).
	ReasonDisabled Reason = "disabled"
	// ReasonCPUFallback: the type's queue was full and the job went to its CPU fallback type.
	ReasonCPUFallback Reason = "cpu_fallback"
	// ReasonDuplicate: the request was refused, but its job_id names a job of the agent that
	// exists already; the submit goes on and answers with that job, writing nothing, as a
	// repeated submit always does.
	ReasonDuplicate Reason = "duplicate"
)

// Reasons of a rejected request (and ReasonLimiterDown, which may be either).
const (
	// ReasonRateLimited: the agent's token bucket is empty.
	ReasonRateLimited Reason = "rate_limited"
	// ReasonGPUPressure: the GPU gate is closed (cluster GPU memory near full).
	ReasonGPUPressure Reason = "gpu_pressure"
	// ReasonQueueFull: the type's backlog is at its queue_limit and it has no fallback (or
	// the fallback is full too).
	ReasonQueueFull Reason = "queue_full"
	// ReasonMaxPending: the agent has max_pending unfinished jobs already.
	ReasonMaxPending Reason = "max_pending"
	// ReasonLimiterDown: Redis did not answer the token-bucket call; the request was admitted
	// or refused by admission.limiter_down_gpu / limiter_down_cpu.
	ReasonLimiterDown Reason = "limiter_unavailable"
)

// Decision labels of the metric.
const (
	DecisionAdmitted = "admitted"
	DecisionRejected = "rejected"
)

// admittedReasons and rejectedReasons are every reason each decision can carry: the label
// values pre-created at 0.
var (
	admittedReasons = []Reason{ReasonOK, ReasonExempt, ReasonDisabled, ReasonCPUFallback, ReasonDuplicate, ReasonLimiterDown}
	rejectedReasons = []Reason{ReasonRateLimited, ReasonGPUPressure, ReasonQueueFull, ReasonMaxPending, ReasonLimiterDown}
)

// JobRequest is a submit to decide on.
type JobRequest struct {
	Agent string
	Type  string
	// JobID is the id the job will have. The queue gate tracks the submits it admitted by id
	// until they are written (see Controller.Finished), so the caller should generate the id
	// of a job whose client sent none before asking. A refused request whose job exists
	// already is admitted as a duplicate (ReasonDuplicate).
	JobID string
	// IDGenerated says that JobID was made up for this request (the client sent none), so it
	// names no existing job and a refusal need not look for one.
	IDGenerated bool
	// GPU says the submit itself asks for GPU memory (its resources), whatever its type's
	// default: the GPU gate decides on it too.
	GPU bool
}

// LeaseRequest is a lease request to decide on.
type LeaseRequest struct {
	Agent string
	// GPU is true for a gpu lease (subject to the GPU gate and limiter_down_gpu).
	GPU bool
}

// Decision is the outcome of one admission check.
type Decision struct {
	Admitted bool
	Reason   Reason
	// Type is the job type an admitted job is to be submitted as: the requested type, or its
	// CPU fallback when Reason is ReasonCPUFallback (or the existing job's type for a
	// duplicate). Empty for a lease.
	Type string
	// RoutedFrom is the requested type of a job routed to its fallback.
	RoutedFrom string
	// RetryAfter is when a refused request may succeed: from the token bucket, the GPU gate's
	// hold, or a refresh interval for the gates that move with the backlog. Zero when admitted.
	RetryAfter time.Duration
	// Message explains a rejection to the client.
	Message string

	// queued is the limited type whose queue the admitted job holds a place in, until
	// Controller.Finished, and queuedID its job id.
	queued, queuedID string
	// unwritten is the agent whose max_pending the admitted job holds a place under, until
	// Controller.Finished.
	unwritten string
}

// Routed reports whether the job goes to another type than the one requested.
func (d Decision) Routed() bool { return d.RoutedFrom != "" }

// Error is a rejection as an error, for callers that pass it up.
func (d Decision) Error() string {
	if d.Admitted {
		return "admitted (" + string(d.Reason) + ")"
	}
	return fmt.Sprintf("admission rejected (%s): %s; retry after %s", d.Reason, d.Message, d.RetryAfter)
}

func admit(reason Reason, typ string) Decision {
	return Decision{Admitted: true, Reason: reason, Type: typ}
}

func reject(reason Reason, retryAfter time.Duration, format string, args ...any) Decision {
	return Decision{Reason: reason, RetryAfter: retryAfter, Message: fmt.Sprintf(format, args...)}
}

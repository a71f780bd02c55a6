package store

import (
	"context"
	"time"
)

// ApprovalPolicy holds matching submits for a person's approval (db/migrations/mysql/
// 018_approvals.up.sql). A criterion left empty or 0 matches any job.
type ApprovalPolicy struct {
	Name string
	// Type and Agent match the job's type and agent.
	Type  string
	Agent string
	// MinGPUs matches a job that needs at least this many GPUs; MinGPUMemoryMB one that needs
	// at least this much GPU memory in all (per GPU times GPUs).
	MinGPUs        int
	MinGPUMemoryMB int64
	// TwoKey asks two distinct approvers.
	TwoKey bool
	// TTL is how long a request waits before OnExpiry.
	TTL      time.Duration
	OnExpiry ApprovalExpiry
	// UpdatedBy and UpdatedAt: who set the policy, when (a policy of the configuration: "config").
	UpdatedBy string
	UpdatedAt time.Time
}

// ApprovalExpiry is what an approval request's expiry does.
type ApprovalExpiry string

// What an expiry does.
const (
	// ExpiryReject: the request expires and its job is cancelled.
	ExpiryReject ApprovalExpiry = "reject"
	// ExpiryEscalate: the request waits on, escalated: only an admin decides it now.
	ExpiryEscalate ApprovalExpiry = "escalate"
)

// ApprovalStatus is the state of an approval request.
type ApprovalStatus string

// Approval request states: waiting and escalated are open; the others are decided.
const (
	ApprovalWaiting   ApprovalStatus = "waiting"
	ApprovalEscalated ApprovalStatus = "escalated"
	ApprovalApproved  ApprovalStatus = "approved"
	ApprovalRejected  ApprovalStatus = "rejected"
	ApprovalExpired   ApprovalStatus = "expired"
)

// Open reports whether the request still waits for a decision.
func (s ApprovalStatus) Open() bool { return s == ApprovalWaiting || s == ApprovalEscalated }

// ApprovalRequest is one row of approval_requests: a job held for approval.
type ApprovalRequest struct {
	JobID  string
	Agent  string
	Policy string
	// Required is how many distinct approvers must approve: 1, or 2 for a two-key policy.
	Required int
	Status   ApprovalStatus
	OnExpiry ApprovalExpiry
	// ExpiresAt is when the request expires; nil once decided or escalated.
	ExpiresAt *time.Time
	CreatedAt time.Time
	DecidedAt *time.Time
	// Type is the job's type (read with the request by ApprovalListOpen; not a column).
	Type string
}

// Approval decisions.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
)

// ApprovalDecision is one row of approval_decisions: one approver's decision on a job.
type ApprovalDecision struct {
	JobID     string
	Approver  string // the audit actor: "approver:NAME" or "admin:<token id>"
	Decision  string // DecisionApprove or DecisionReject
	Reason    string
	DecidedAt time.Time
}

// ApprovalListParams selects open approval requests, oldest first.
type ApprovalListParams struct {
	Agent string // empty: any
	Limit int
}

// ApprovalExecutor is the operations on approval_policies, approval_requests and
// approval_decisions.
type ApprovalExecutor interface {
	// ApprovalPolicyList returns every policy of the table, by name.
	ApprovalPolicyList(ctx context.Context) ([]ApprovalPolicy, error)
	// ApprovalPolicyUpsert writes one policy (a new one, or over the one of its name).
	ApprovalPolicyUpsert(ctx context.Context, p ApprovalPolicy) error
	// ApprovalPolicyDelete deletes one policy; ErrNotFound when there is none of the name.
	ApprovalPolicyDelete(ctx context.Context, name string) error

	// ApprovalInsert inserts requests (held for the transaction's next round trip where the
	// driver holds writes).
	ApprovalInsert(ctx context.Context, rs []ApprovalRequest) error
	// ApprovalGet returns one job's request (locked when forUpdate) or ErrNotFound.
	ApprovalGet(ctx context.Context, jobID string, forUpdate bool) (ApprovalRequest, error)
	// ApprovalSetStatus moves a request from → to at now: a decided status sets decided_at,
	// and every move but to waiting clears expires_at. ErrConflict when it is no longer from.
	ApprovalSetStatus(ctx context.Context, jobID string, from, to ApprovalStatus, now time.Time) error
	// ApprovalDecide records one approver's decision; ErrConflict when that approver decided
	// on the job already.
	ApprovalDecide(ctx context.Context, d ApprovalDecision) error
	// ApprovalDecisions returns the decisions on the jobs among ids, by job then time.
	ApprovalDecisions(ctx context.Context, ids []string) ([]ApprovalDecision, error)
	// ApprovalListOpen returns open requests (waiting, escalated), oldest first, with their
	// jobs' types.
	ApprovalListOpen(ctx context.Context, p ApprovalListParams) ([]ApprovalRequest, error)
	// ApprovalListExpired returns up to limit jobs whose waiting request expired at now.
	ApprovalListExpired(ctx context.Context, now time.Time, limit int) ([]string, error)
	// ApprovalDeleteOrphans deletes the requests and decisions of up to limit jobs that are
	// gone (retention deleted them) and returns how many requests it deleted.
	ApprovalDeleteOrphans(ctx context.Context, limit int) (int, error)
}

package wire

import "time"

// Error codes of approval decisions (409).
const (
	// CodeNotAwaitingApproval: the job is not held for approval (never was, was decided, or is
	// a fan-out child whose parent's approval decides it).
	CodeNotAwaitingApproval = "not_awaiting_approval"
	// CodeAlreadyDecided: this approver decided on the job already; a two-key request needs
	// two distinct approvers.
	CodeAlreadyDecided = "already_decided"
	// CodeApprovalExpired: the request is past its TTL; the leader rejects or escalates it.
	CodeApprovalExpired = "approval_expired"
)

// DecisionRequest is the body of POST /jobs/{id}/approve and /reject.
type DecisionRequest struct {
	// Reason says why (1 to 1024 bytes): audited with the approver, and a rejection's is the
	// cancelled job's last_error.
	Reason string `json:"reason"`
}

// DecisionResponse answers a decision: the job's status after it (pending or waiting once
// approved, cancelled once rejected, still awaiting_approval when a second key is needed) and
// its request's.
type DecisionResponse struct {
	JobID          string `json:"job_id"`
	JobStatus      string `json:"job_status"`
	ApprovalStatus string `json:"approval_status"`
	// Approvals counts the request's approvals so far; Required is how many it needs.
	Approvals int `json:"approvals"`
	Required  int `json:"required"`
}

// Approval is a job held for approval, as GET /approvals lists it.
type Approval struct {
	JobID  string `json:"job_id"`
	Type   string `json:"type"`
	Agent  string `json:"agent"`
	Policy string `json:"policy"`
	// Required is how many distinct approvers must approve (2 for two-key).
	Required int `json:"required"`
	// Status is waiting, or escalated (its TTL passed and its policy escalates: only an admin
	// decides it now).
	Status string `json:"status"`
	// ExpiresAt is when a waiting request expires; OnExpiry what then (reject or escalate).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	OnExpiry  string     `json:"on_expiry"`
	CreatedAt time.Time  `json:"created_at"`
	// Decisions are the decisions so far (an approval waiting for its second key).
	Decisions []ApprovalDecision `json:"decisions"`
}

// ApprovalDecision is one approver's decision.
type ApprovalDecision struct {
	Approver  string    `json:"approver"`
	Decision  string    `json:"decision"` // approve | reject
	Reason    string    `json:"reason"`
	DecidedAt time.Time `json:"decided_at"`
}

// ApprovalList answers GET /approvals: the jobs held for approval, oldest first.
type ApprovalList struct {
	Approvals []Approval `json:"approvals"`
}

// ApprovalPolicy is one approval policy: it holds the submits it matches (every criterion set
// must hold: type, agent, at least min_gpus GPUs, at least min_gpu_memory_mb of GPU memory in
// all) until approved. It is the body of PUT /approvals/policies.
type ApprovalPolicy struct {
	Name           string `json:"name"`
	Type           string `json:"type,omitempty"`
	Agent          string `json:"agent,omitempty"`
	MinGPUs        int    `json:"min_gpus,omitempty"`
	MinGPUMemoryMB int64  `json:"min_gpu_memory_mb,omitempty"`
	// TwoKey asks two distinct approvers.
	TwoKey bool `json:"two_key,omitempty"`
	// TTLSeconds is how long a request waits (default 86400, at most 2592000).
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// OnExpiry is reject (the default: the job is cancelled) or escalate (it waits on for an
	// admin).
	OnExpiry string `json:"on_expiry,omitempty"`
	// UpdatedBy and UpdatedAt say who set it, when (answers only; "config" for the
	// configuration's, which PUT and DELETE do not change).
	UpdatedBy string     `json:"updated_by,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// ApprovalPolicyList answers GET /approvals/policies: the policies in force, in the order they
// are matched (two-key first, then by name).
type ApprovalPolicyList struct {
	Policies []ApprovalPolicy `json:"policies"`
}

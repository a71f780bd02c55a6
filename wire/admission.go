package wire

import (
	"time"
)

// Error codes of an admission rejection (ErrorDetail.Code of a 429, whose Retry-After header
// says when to try again). While the limiter's Redis is unreachable and the work fails closed,
// the answer is a 503 with the code "unavailable" and a Retry-After instead.
const (
	// CodeRateLimited: the agent's token bucket is empty.
	CodeRateLimited = "rate_limited"
	// CodeGPUPressure: cluster GPU memory is near full; GPU job types and GPU leases wait.
	CodeGPUPressure = "gpu_pressure"
	// CodeQueueFull: the job type's backlog is at its queue_limit (and its CPU fallback's too).
	CodeQueueFull = "queue_full"
	// CodeMaxPending: the agent has max_pending unfinished jobs already.
	CodeMaxPending = "max_pending"
	// CodeQuota: a gpu lease (POST /leases) would take the agent past its GPU quota
	// (max_gpus, max_gpu_memory_mb) with what it holds already.
	CodeQuota = "quota"
)

// AdmissionDefaultAgent is the agent of the default policy in PUT /control/admission.
const AdmissionDefaultAgent = "*"

// AdmissionPolicy is an agent's admission policy.
type AdmissionPolicy struct {
	Agent      string  `json:"agent"`
	RatePerSec float64 `json:"rate_per_sec"`
	Burst      int     `json:"burst"`
	// MaxPending caps the agent's unfinished jobs; 0: no cap.
	MaxPending int `json:"max_pending"`
	// MaxGPUMemoryMB caps the GPU memory the agent holds at once in active gpu leases (its
	// jobs' and its own; a lease counts its memory on each of its GPUs); 0: no cap.
	MaxGPUMemoryMB int64 `json:"max_gpu_memory_mb"`
	// MaxGPUs caps the GPUs the agent holds at once (two leases of one GPU count two); 0: no
	// cap. The default policy's caps each agent without a policy, not all of them together.
	MaxGPUs int `json:"max_gpus"`
	// Enabled false exempts the agent from its bucket, max_pending and its GPU quota (not from
	// the gates).
	Enabled bool `json:"enabled"`
	// UpdatedAt is the last change; absent for the configured default policy.
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// AdmissionPolicyUpdate is the body of PUT /control/admission. Absent fields keep the agent's
// current value (its policy, else the default policy's); when rate_per_sec changes and burst is
// absent, burst becomes two seconds' worth of the new rate.
type AdmissionPolicyUpdate struct {
	// Agent names the agent, or "*" for the default policy.
	Agent      string   `json:"agent"`
	RatePerSec *float64 `json:"rate_per_sec,omitempty"`
	Burst      *int     `json:"burst,omitempty"`
	MaxPending *int     `json:"max_pending,omitempty"`
	// MaxGPUMemoryMB and MaxGPUs set the GPU quota: 0..1073741824 MB and 0..1048576 GPUs, 0
	// for no cap.
	MaxGPUMemoryMB *int64 `json:"max_gpu_memory_mb,omitempty"`
	MaxGPUs        *int   `json:"max_gpus,omitempty"`
	Enabled        *bool  `json:"enabled,omitempty"`
}

// AdmissionStatus is the answer of GET /control/admission: the answering instance's view.
type AdmissionStatus struct {
	Enabled       bool            `json:"enabled"`
	DefaultPolicy AdmissionPolicy `json:"default_policy"`
	// DefaultSource is "config" (default_policy) or "table" (the "*" policy).
	DefaultSource    string            `json:"default_source"`
	Policies         []AdmissionPolicy `json:"policies"`
	PoliciesLoadedAt *time.Time        `json:"policies_loaded_at,omitempty"`
	GPU              AdmissionGPUGate  `json:"gpu_pressure"`
	Queues           []AdmissionQueue  `json:"queues"`
	Limiter          AdmissionLimiter  `json:"limiter"`
	RefreshInterval  Duration          `json:"refresh_interval"`
}

// Admission gate states.
const (
	GateOpen   = "open"
	GateClosed = "closed"
)

// AdmissionGPUGate is the GPU-pressure gate and the measurement it last saw.
type AdmissionGPUGate struct {
	// State is open or closed.
	State            string     `json:"state"`
	PressurePct      float64    `json:"pressure_pct"`
	UsedMB           int64      `json:"used_mb"`
	TotalMB          int64      `json:"total_mb"`
	FreshGPUs        int        `json:"fresh_gpus"`
	StaleGPUs        int        `json:"stale_gpus"`
	HighWatermarkPct float64    `json:"high_watermark_pct"`
	LowWatermarkPct  float64    `json:"low_watermark_pct"`
	Hold             Duration   `json:"hold"`
	ClosedSince      *time.Time `json:"closed_since,omitempty"`
	HoldUntil        *time.Time `json:"hold_until,omitempty"`
	MeasuredAt       *time.Time `json:"measured_at,omitempty"`
	// Nodes is the pressure per node (fresh GPUs only, unless none of the node's is fresh).
	Nodes []AdmissionNodePressure `json:"nodes"`
}

// AdmissionNodePressure is one node's GPU memory pressure.
type AdmissionNodePressure struct {
	NodeID      string   `json:"node_id"`
	PressurePct float64  `json:"pressure_pct"`
	UsedMB      int64    `json:"used_mb"`
	TotalMB     int64    `json:"total_mb"`
	GPUs        int      `json:"gpus"`
	Fresh       bool     `json:"fresh"`
	Age         Duration `json:"age"`
}

// AdmissionQueue is the backlog of a job type with a queue_limit.
type AdmissionQueue struct {
	Type        string `json:"type"`
	Backlog     int    `json:"backlog"`
	Limit       int    `json:"limit"`
	Full        bool   `json:"full"`
	CPUFallback string `json:"cpu_fallback,omitempty"`
}

// AdmissionLimiter is whether the token-bucket limiter's Redis answers, and what happens
// while it does not.
type AdmissionLimiter struct {
	// State is "up" or "down".
	State     string     `json:"state"`
	DownSince *time.Time `json:"down_since,omitempty"`
	Error     string     `json:"error,omitempty"`
	// OnDownGPU and OnDownCPU are "open" (admit) or "closed" (refuse).
	OnDownGPU string `json:"on_down_gpu"`
	OnDownCPU string `json:"on_down_cpu"`
}

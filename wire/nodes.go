package wire

import "time"

// Node is a node of the registry as GET /nodes and GET /nodes/{id} show it.
type Node struct {
	ID string `json:"id"`
	// Labels are the configured labels merged with the gpu.* ones from telemetry.
	Labels map[string]string `json:"labels"`
	// Status is ready, cordoned or offline (no live worker and stale telemetry).
	Status string `json:"status"`
	// GPUs are the node's GPUs as GET /gpus shows them.
	GPUs    []GPU        `json:"gpus"`
	Workers []NodeWorker `json:"workers"`
	// ActiveLeases counts the node's active leases; Leases lists them, newest first.
	ActiveLeases int         `json:"active_leases"`
	Leases       []NodeLease `json:"leases"`
	// FirstSeen and LastSeen are absent for a node that workers or GPUs name but the registry
	// has not recorded yet.
	FirstSeen *time.Time `json:"first_seen,omitempty"`
	LastSeen  *time.Time `json:"last_seen,omitempty"`
	// Cordoned is true while the scheduler places no new job on the node. CordonReason and
	// CordonedBy are those of the last cordon or uncordon; CordonedAt is set while cordoned.
	Cordoned     bool       `json:"cordoned"`
	CordonReason string     `json:"cordon_reason,omitempty"`
	CordonedBy   string     `json:"cordoned_by,omitempty"`
	CordonedAt   *time.Time `json:"cordoned_at,omitempty"`
}

// NodeWorker is a worker registered on a node.
type NodeWorker struct {
	WorkerID string   `json:"worker_id"`
	PoolID   string   `json:"pool_id,omitempty"`
	Status   string   `json:"status"`
	Types    []string `json:"types"`
}

// NodeLease is an active lease on a node. The token is shown to admins and to the lease's own
// agent only: it is the capability that renews and releases the lease.
type NodeLease struct {
	LeaseToken string `json:"lease_token,omitempty"`
	Agent      string `json:"agent,omitempty"` // an admin and the lease's own agent only
	JobID      string `json:"job_id,omitempty"`
	Mode       string `json:"mode"`
	MemoryMB   int64  `json:"memory_mb"`
	GPUIndexes []int  `json:"gpu_indexes,omitempty"`
}

// NodeList is the answer of GET /nodes.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}

// CordonRequest is the optional body of POST /nodes/{id}/cordon and /uncordon.
type CordonRequest struct {
	// Reason says why (at most 512 bytes); it is audited and shown with the node.
	Reason string `json:"reason,omitempty"`
}

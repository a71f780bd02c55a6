package wire

import (
	"encoding/json"
	"time"
)

// Pool states.
const (
	PoolStarting = "starting"
	PoolRunning  = "running"
	PoolDraining = "draining"
	PoolStopped  = "stopped"
	PoolEvicted  = "evicted"
)

// Worker states.
const (
	WorkerIdle      = "idle"
	WorkerExecuting = "executing"
	WorkerDraining  = "draining"
	WorkerOffline   = "offline"
)

// Worker instructions, carried by the answers to registrations and heartbeats.
const (
	// InstructionNone: keep working.
	InstructionNone = ""
	// InstructionDrain: stop reading new entries, finish the jobs in flight, report them
	// (which releases their leases), deregister and exit with status 0.
	InstructionDrain = "drain"
	// InstructionStop: as drain, but cancel the jobs in flight at once (the orchestrator has
	// rescued them already).
	InstructionStop = "stop"
)

// PoolRequest is the body of POST /workers/pool. Posting the same pool again is idempotent;
// another spec (a new desired_workers, say) updates it, and a drained, stopped or evicted pool
// starts again.
type PoolRequest struct {
	PoolID    string `json:"pool_id"`
	AgentName string `json:"agent_name"`
	ModelID   string `json:"model_id"`
	Adapter   string `json:"adapter,omitempty"`
	Variant   string `json:"variant,omitempty"`
	// Types are the job types the pool's workers serve.
	Types          []string `json:"types"`
	DesiredWorkers int      `json:"desired_workers"`
	// HoldSeconds drains the pool after this long without a claimed job or an agent
	// heartbeat; 0 holds it forever.
	HoldSeconds int             `json:"hold_seconds"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

// Pool is a worker pool as the API shows it.
type Pool struct {
	PoolID         string   `json:"pool_id"`
	AgentName      string   `json:"agent_name"`
	ModelID        string   `json:"model_id"`
	Adapter        string   `json:"adapter,omitempty"`
	Variant        string   `json:"variant,omitempty"`
	Types          []string `json:"types"`
	DesiredWorkers int      `json:"desired_workers"`
	// SpawnedWorkers is how many workers are live and not leaving, as last counted.
	SpawnedWorkers  int             `json:"spawned_workers"`
	Status          string          `json:"status"`
	StatusReason    string          `json:"status_reason,omitempty"`
	StatusChangedAt time.Time       `json:"status_changed_at"`
	HoldSeconds     int             `json:"hold_seconds"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	StartedAt       time.Time       `json:"started_at"`
	LastHeartbeat   *time.Time      `json:"last_heartbeat,omitempty"`
	LastActivityAt  *time.Time      `json:"last_activity_at,omitempty"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
	// Workers are the pool's registered workers (GET /workers/pools/{id} only).
	Workers []Worker `json:"workers,omitempty"`
}

// PoolResponse answers POST /workers/pool: 201 when the pool was created, 200 otherwise.
type PoolResponse struct {
	Pool    Pool `json:"pool"`
	Created bool `json:"created"`
	// Updated: the spec changed or the pool restarted.
	Updated bool `json:"updated"`
	// PreloadID is the entry of the preload event on stream:orchestrator:preloads.
	PreloadID string `json:"preload_id,omitempty"`
}

// PoolList answers GET /workers/pools.
type PoolList struct {
	Pools []Pool `json:"pools"`
}

// PoolChange answers a drain or an eviction: the pool afterwards, and whether the call
// changed it (false: it was drained, stopped or evicted already).
type PoolChange struct {
	Pool    Pool `json:"pool"`
	Changed bool `json:"changed"`
}

// EvictRequest is the body of POST /control/evict_pool.
type EvictRequest struct {
	PoolID string `json:"pool_id"`
}

// DrainAllResponse answers POST /control/drain: the pools it drained.
type DrainAllResponse struct {
	Drained []Pool `json:"drained"`
}

// ReconcileResponse answers POST /control/reconcile. Triggered is false when the answering
// instance does not lead: the leader reconciles on its own schedule.
type ReconcileResponse struct {
	Triggered bool `json:"triggered"`
}

// Worker is a registered worker as the API shows it.
type Worker struct {
	WorkerID      string          `json:"worker_id"`
	PoolID        string          `json:"pool_id,omitempty"`
	NodeID        string          `json:"node_id,omitempty"`
	Hostname      string          `json:"hostname,omitempty"`
	PID           int             `json:"pid,omitempty"`
	Types         []string        `json:"types"`
	Concurrency   int             `json:"concurrency"`
	Status        string          `json:"status"`
	Instruction   string          `json:"instruction,omitempty"`
	InFlight      int             `json:"in_flight"`
	JobsClaimed   int64           `json:"jobs_claimed"`
	RegisteredAt  time.Time       `json:"registered_at"`
	LastHeartbeat time.Time       `json:"last_heartbeat"`
	LastActiveAt  *time.Time      `json:"last_active_at,omitempty"`
	Telemetry     json.RawMessage `json:"telemetry,omitempty"`
	// WarmModel is the model the worker preloaded before it registered.
	WarmModel string `json:"warm_model,omitempty"`
}

// RegisterWorkerRequest is the body of POST /internal/workers/register.
type RegisterWorkerRequest struct {
	WorkerID    string   `json:"worker_id"`
	PoolID      string   `json:"pool_id,omitempty"`
	NodeID      string   `json:"node_id,omitempty"`
	Hostname    string   `json:"hostname,omitempty"`
	PID         int      `json:"pid,omitempty"`
	Types       []string `json:"types"`
	Concurrency int      `json:"concurrency"`
	// NodeLabels are the labels the worker's configuration gives its node (node_labels): the
	// full configured set, which replaces the node's configured labels ({} clears them; left
	// out, as an older worker does, they are kept).
	NodeLabels map[string]string `json:"node_labels"`
	// WarmModel is the model the worker ran its pool's preload command for before it
	// registered (worker.preload); absent when it ran none.
	WarmModel string `json:"warm_model,omitempty"`
}

// WorkerHeartbeatRequest is the body of POST /internal/workers/{id}/heartbeat.
type WorkerHeartbeatRequest struct {
	// Status is idle, executing or draining.
	Status   string `json:"status"`
	InFlight int    `json:"in_flight"`
	// JobsClaimed is the worker's running total of claimed jobs.
	JobsClaimed int64          `json:"jobs_claimed"`
	Telemetry   *NodeTelemetry `json:"telemetry,omitempty"`
}

// WorkerInstruction answers a registration or a heartbeat. An unknown worker's heartbeat is a
// 404: it registers again.
type WorkerInstruction struct {
	// Instruction is "", "drain" or "stop".
	Instruction string `json:"instruction"`
	// HeartbeatInterval is how often to heartbeat.
	HeartbeatInterval Duration `json:"heartbeat_interval"`
	// PoolStatus is the status of the worker's pool ("" when it has none).
	PoolStatus string `json:"pool_status,omitempty"`
	// PreRunTypes are the job types with a pre-run hook (webhooks.pre_run): the worker asks
	// POST /internal/jobs/pre_run before it runs a job of one of them.
	PreRunTypes []string `json:"pre_run_types,omitempty"`
}

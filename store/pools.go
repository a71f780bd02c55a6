package store

import (
	"context"
	"encoding/json"
	"time"
)

// PoolStatus is the state of a worker pool. The allowed transitions live in package pools.
type PoolStatus string

// Pool states: a pool starts (its workers are being brought up), runs (its desired workers are
// live), drains (its workers finish their jobs and leave), and ends stopped, or evicted when an
// operator took its workers away at once. Both ends can start again when the pool is posted anew.
const (
	PoolStarting PoolStatus = "starting"
	PoolRunning  PoolStatus = "running"
	PoolDraining PoolStatus = "draining"
	PoolStopped  PoolStatus = "stopped"
	PoolEvicted  PoolStatus = "evicted"
)

// PoolStatuses lists every pool state, in lifecycle order.
var PoolStatuses = []PoolStatus{PoolStarting, PoolRunning, PoolDraining, PoolStopped, PoolEvicted}

// Valid reports whether s is one of the known states.
func (s PoolStatus) Valid() bool {
	for _, v := range PoolStatuses {
		if s == v {
			return true
		}
	}
	return false
}

// Live reports whether the pool should have workers (starting or running).
func (s PoolStatus) Live() bool { return s == PoolStarting || s == PoolRunning }

// Pool is one row of worker_pools.
type Pool struct {
	ID             string
	Agent          string
	ModelID        string
	Adapter        string
	Variant        string
	Types          []string
	DesiredWorkers int
	// SpawnedWorkers is what the reconciler last counted live.
	SpawnedWorkers int
	Status         PoolStatus
	StatusReason   string
	// StatusChangedAt is when Status last changed: grace periods count from it.
	StatusChangedAt time.Time
	// HoldSeconds drains the pool after this long idle; 0: never.
	HoldSeconds    int
	CreatedAt      time.Time
	UpdatedAt      time.Time
	StartedAt      time.Time
	LastHeartbeat  *time.Time // the agent's last pool heartbeat
	LastActivityAt *time.Time // a worker's last report of work
	Metadata       json.RawMessage
}

// PoolSpec is what the creator of a pool chooses; PoolUpdate replaces it as a whole.
type PoolSpec struct {
	Agent          string
	ModelID        string
	Adapter        string
	Variant        string
	Types          []string
	DesiredWorkers int
	HoldSeconds    int
	Metadata       json.RawMessage
}

// PoolUpdate is a compare-and-set write of one pool: applied only while its status is still
// From (else ErrConflict, or ErrNotFound when the pool does not exist). Nil fields are left
// unchanged; a To different from From also sets status_changed_at to Now.
type PoolUpdate struct {
	ID             string
	From           PoolStatus
	To             PoolStatus
	StatusReason   *string
	Spec           *PoolSpec
	SpawnedWorkers *int
	StartedAt      *time.Time
	Now            time.Time // updated_at
}

// WorkerStatus is the state of a registered worker as it reports it (offline: as the leader
// concluded from its silence).
type WorkerStatus string

// Worker states.
const (
	WorkerIdle      WorkerStatus = "idle"
	WorkerExecuting WorkerStatus = "executing"
	WorkerDraining  WorkerStatus = "draining"
	WorkerOffline   WorkerStatus = "offline"
)

// Valid reports whether s is one of the known states.
func (s WorkerStatus) Valid() bool {
	return s == WorkerIdle || s == WorkerExecuting || s == WorkerDraining || s == WorkerOffline
}

// WorkerInstruction is what a worker's next heartbeat answer tells it to do.
type WorkerInstruction string

// Instructions, in increasing severity: none; drain (stop reading, finish the jobs in flight,
// deregister, exit); stop (cancel the jobs in flight too, and exit at once).
const (
	InstructionNone  WorkerInstruction = ""
	InstructionDrain WorkerInstruction = "drain"
	InstructionStop  WorkerInstruction = "stop"
)

// Severity orders instructions: a worker told to stop is not told to drain afterwards.
func (i WorkerInstruction) Severity() int {
	switch i {
	case InstructionDrain:
		return 1
	case InstructionStop:
		return 2
	}
	return 0
}

// Worker is one row of workers.
type Worker struct {
	ID            string
	PoolID        string
	NodeID        string
	Hostname      string
	PID           int
	Types         []string
	Concurrency   int
	Status        WorkerStatus
	Instruction   WorkerInstruction
	InFlight      int
	JobsClaimed   int64
	Telemetry     json.RawMessage
	RegisteredAt  time.Time
	LastHeartbeat time.Time
	LastActiveAt  *time.Time
	// WarmModel is the model the worker ran its preload command for before it registered
	// ("" when it ran none): the scheduler prefers its node for jobs of that model.
	WarmModel string
}

// WorkerUpdate writes one worker's row (ErrNotFound when it does not exist). Nil fields are
// left unchanged.
type WorkerUpdate struct {
	ID            string
	Status        *WorkerStatus
	Instruction   *WorkerInstruction
	InFlight      *int
	JobsClaimed   *int64
	Telemetry     json.RawMessage // nil: unchanged
	LastHeartbeat *time.Time
	LastActiveAt  *time.Time
}

// WorkerOfflineParams select the workers to mark offline: those among IDs that are not offline
// yet and whose last heartbeat is before HeartbeatBefore. No IDs select nothing: the leader
// always names the workers it judged, so that a heartbeat arriving meanwhile is not overruled.
type WorkerOfflineParams struct {
	IDs             []string
	HeartbeatBefore time.Time
}

// PoolExecutor is the operations on worker_pools and workers, and the lookup of a pool's jobs
// in flight that its eviction rescues.
type PoolExecutor interface {
	// PoolInsert inserts a new pool; a pool_id that exists is ErrConflict.
	PoolInsert(ctx context.Context, p Pool) error
	// PoolGet returns one pool or ErrNotFound; forUpdate locks it for the transaction.
	PoolGet(ctx context.Context, id string, forUpdate bool) (Pool, error)
	// PoolList returns the pools with one of statuses (every pool when empty), by pool_id.
	PoolList(ctx context.Context, statuses ...PoolStatus) ([]Pool, error)
	// PoolUpdate applies one compare-and-set write.
	PoolUpdate(ctx context.Context, u PoolUpdate) error
	// PoolTouch records the agent's heartbeat (heartbeat true) or a worker's report of work
	// (heartbeat false) at now; ErrNotFound when the pool does not exist. It never moves the
	// time backwards.
	PoolTouch(ctx context.Context, id string, heartbeat bool, now time.Time) error

	// WorkerUpsert registers a worker: inserted, or its row replaced when the id exists (a
	// restarted worker is a new life: its instruction and counters start afresh).
	WorkerUpsert(ctx context.Context, w Worker) error
	// WorkerGet returns one worker or ErrNotFound; forUpdate locks it for the transaction.
	WorkerGet(ctx context.Context, id string, forUpdate bool) (Worker, error)
	// WorkerList returns the workers of poolID (every worker when all is true), by worker_id.
	WorkerList(ctx context.Context, poolID string, all bool) ([]Worker, error)
	// WorkerUpdate writes one worker's row.
	WorkerUpdate(ctx context.Context, u WorkerUpdate) error
	// WorkerMarkOffline marks the selected workers offline (in_flight 0) and returns their
	// ids, sorted.
	WorkerMarkOffline(ctx context.Context, p WorkerOfflineParams) ([]string, error)
	// WorkerDelete deletes a worker's row (deregistration); ErrNotFound when it does not exist.
	WorkerDelete(ctx context.Context, id string) error
	// WorkerDeleteOffline deletes up to limit offline workers whose last heartbeat is before
	// before, and returns how many it deleted.
	WorkerDeleteOffline(ctx context.Context, before time.Time, limit int) (int, error)

	// JobListInFlightByPool returns up to limit claimed or running jobs whose owner_pool is
	// poolID, by job_id, without their payloads (Payload nil).
	JobListInFlightByPool(ctx context.Context, poolID string, limit int) ([]Job, error)
}

package store

import (
	"context"
	"encoding/json"
	"time"
)

// LeaseMode is what a lease holds: a share of one GPU's memory, or a CPU slot.
type LeaseMode string

// Lease modes.
const (
	LeaseGPU LeaseMode = "gpu"
	LeaseCPU LeaseMode = "cpu"
)

// LeaseStatus is the state of a lease. The allowed transitions live in package leases.
type LeaseStatus string

// Lease states: a lease is active until its holder releases it or it expires (its holder went
// quiet past expires_at and the purger noticed). Both ends are final: nothing resurrects a lease.
const (
	LeaseActive   LeaseStatus = "active"
	LeaseReleased LeaseStatus = "released"
	LeaseExpired  LeaseStatus = "expired"
)

// Valid reports whether s is one of the known states.
func (s LeaseStatus) Valid() bool {
	return s == LeaseActive || s == LeaseReleased || s == LeaseExpired
}

// Lease is one row of orchestrator_leases.
type Lease struct {
	Token    string // 128 random bits, the capability that renews and releases the lease
	Agent    string // the agent the resource is held for (a job lease: the job's agent)
	JobID    string // the job of a worker-held lease; empty for an agent's own lease
	NodeID   string
	GPUIndex *int // the (first) GPU of a gpu lease; nil for a cpu lease
	// GPUIndexes are all the GPUs of a gpu lease, GPUIndex first: one for most leases, several
	// (of one node) for a job that asked for more. Nil for a cpu lease.
	GPUIndexes []int
	Mode       LeaseMode
	MemoryMB   int64 // GPU memory reserved on each of its GPUs (gpu lease)
	// Exclusive leases hold their whole GPU: nothing else is placed on it while they are active.
	Exclusive bool
	// TTL is how far a heartbeat moves ExpiresAt (stored in milliseconds).
	TTL           time.Duration
	Status        LeaseStatus
	CreatedAt     time.Time
	ExpiresAt     time.Time
	LastHeartbeat time.Time
	EndedAt       *time.Time // when it was released or expired
	Metadata      json.RawMessage
}

// LeaseListParams filters GET /leases; empty fields match everything. Leases come newest first.
type LeaseListParams struct {
	Status LeaseStatus
	Agent  string
	NodeID string
	JobID  string
	Limit  int
}

// LeaseStatusUpdate is a compare-and-set of a lease's status: applied only while the lease is
// still From (else ErrConflict, or ErrNotFound when the token does not exist). EndedAt is set to
// Now when To is final.
type LeaseStatusUpdate struct {
	Token string
	From  LeaseStatus
	To    LeaseStatus
	Now   time.Time
}

// GPUDevice is one row of gpu_devices: the latest telemetry of one GPU of one node.
type GPUDevice struct {
	NodeID         string
	Index          int
	UUID           string
	Name           string
	MemoryTotalMB  int64
	MemoryUsedMB   int64
	UtilizationPct int // -1: unknown
	TemperatureC   int // -1: unknown
	PowerWatts     float64
	// Lost marks a GPU the node counts but cannot use (fell off the bus, needs a reset):
	// placement skips it, operators still see it.
	Lost       bool
	LostReason string
	Source     string    // the provider: nvml, simulated
	UpdatedAt  time.Time // when the orchestrator received the snapshot
}

// GPUSnapshot replaces the telemetry of one node: every listed GPU is upserted, and the rows
// of the node's GPUs that are not listed (neither usable nor lost) are deleted.
type GPUSnapshot struct {
	NodeID string
	GPUs   []GPUDevice // usable and lost GPUs; NodeID and UpdatedAt are taken from the snapshot
	Now    time.Time
}

// GPUCapacity is a GPU with the leases placed on it: what placement and GET /gpus read.
type GPUCapacity struct {
	GPUDevice
	// ReservedMB is the memory of the active leases on the GPU.
	ReservedMB int64
	// Leases counts the active leases on the GPU.
	Leases int
	// Exclusive reports that an active exclusive lease holds the GPU.
	Exclusive bool
}

// NodeJobCount is how many jobs of one type and agent hold an active lease on one node: those
// a worker claimed (Worker names it), or those placed there and not claimed yet (Target is
// their placement's target, store.Target).
type NodeJobCount struct {
	Type, Agent, Node string
	Worker, Target    string
	Jobs              int
}

// GPUHolding is what an agent holds in its active gpu leases: what its GPU quota
// (AdmissionPolicy.MaxGPUs, MaxGPUMemoryMB) caps.
type GPUHolding struct {
	// GPUs is the sum of the leases' GPU counts: two leases of one GPU count two, the
	// conservative reading (each is a share the agent holds).
	GPUs int
	// MemoryMB is the sum of the leases' memory_mb times their GPU counts.
	MemoryMB int64
}

// LeaseExecutor is the operations on orchestrator_leases.
type LeaseExecutor interface {
	// LeaseInsert inserts new leases (one multi-row insert). A token that exists is ErrConflict.
	LeaseInsert(ctx context.Context, leases []Lease) error
	// LeaseGet returns one lease or ErrNotFound; forUpdate locks it for the transaction.
	LeaseGet(ctx context.Context, token string, forUpdate bool) (Lease, error)
	// LeaseGetMany returns the existing leases among tokens (in no particular order); forUpdate
	// locks them, in token order.
	LeaseGetMany(ctx context.Context, tokens []string, forUpdate bool) ([]Lease, error)
	// LeaseExpiredNodes returns, for each job among jobIDs, the nodes where a lease of it
	// expired (its worker was lost there, or no worker there claimed its placement).
	LeaseExpiredNodes(ctx context.Context, jobIDs []string) (map[string][]string, error)
	// LeaseJobsPerNode counts the jobs that hold an active lease, per type, agent, node, and
	// claiming worker or placement target: max_per_node's counts and the workers' slots.
	LeaseJobsPerNode(ctx context.Context) ([]NodeJobCount, error)
	// LeaseHoldings returns what each of agents holds in active gpu leases
	// (idx_leases_agent_status); an agent without any is absent. Inside a transaction that
	// locked every GPU row first (GPULockAll), no grant or placement can change the answer
	// before the commit.
	LeaseHoldings(ctx context.Context, agents []string) (map[string]GPUHolding, error)
	// LeaseList returns leases newest first.
	LeaseList(ctx context.Context, p LeaseListParams) ([]Lease, error)
	// LeaseSetStatus applies one compare-and-set of a lease's status.
	LeaseSetStatus(ctx context.Context, u LeaseStatusUpdate) error
	// LeaseSetStatusMany applies compare-and-set status changes of distinct leases in as few
	// statements as it can; any lease that moved on fails the whole call with ErrConflict.
	LeaseSetStatusMany(ctx context.Context, us []LeaseStatusUpdate) error
	// LeaseHeartbeat extends every lease among tokens that is active and not yet expired at now:
	// expires_at becomes now + its TTL, last_heartbeat now. It never touches a lease that has
	// ended or whose expiry has passed (a heartbeat must not resurrect it). It returns the rows
	// of all existing tokens after the update, so the caller tells renewed from gone.
	LeaseHeartbeat(ctx context.Context, tokens []string, now time.Time) ([]Lease, error)
	// LeaseListExpired returns active leases whose expires_at is at or before now, oldest
	// expiry first.
	LeaseListExpired(ctx context.Context, now time.Time, limit int) ([]Lease, error)

	// The leases jobs without a GPU hold in their own rows (leases.NewJobToken): token
	// lease_token, expiry lease_expires_at.

	// JobLeaseHeartbeat sets the expiry of the leases among tokens held in the rows of the
	// jobs among ids to until, where the job is claimed or running, holds that token and its
	// expiry is after now (a heartbeat never resurrects a lease). It returns the jobs among
	// ids after the update, without payloads, so the caller tells renewed from gone.
	JobLeaseHeartbeat(ctx context.Context, ids, tokens []string, until, now time.Time) ([]Job, error)
	// JobLeasesExpired returns up to limit claimed or running jobs, without payloads, whose
	// lease in their row expired at or before now, oldest expiry first.
	JobLeasesExpired(ctx context.Context, now time.Time, limit int) ([]Job, error)
}

// JobLeaseTokenPrefix starts the tokens of the leases held in job rows (leases.NewJobToken).
const JobLeaseTokenPrefix = "lj_"

// GPUExecutor is the operations on gpu_devices.
type GPUExecutor interface {
	// GPUUpsertSnapshot records one node's telemetry (see GPUSnapshot).
	GPUUpsertSnapshot(ctx context.Context, s GPUSnapshot) error
	// GPUList returns the GPUs of nodeID (every node when empty) with their active
	// reservations, ordered by node and index.
	GPUList(ctx context.Context, nodeID string) ([]GPUCapacity, error)
	// GPULockNode is GPUList of one node inside a transaction that locks the node's GPU rows
	// (SELECT … FOR UPDATE) before it sums the reservations, so that lease grants on one node
	// are serialized across every orchestrator instance. The sums are a consistent read, which
	// then includes every grant committed before the lock was obtained: under READ COMMITTED
	// (the MariaDB store's sessions) every statement reads the latest committed rows; under
	// REPEATABLE READ (a DSN that asks for it) the transaction's snapshot is taken at its first
	// consistent read, so call GPULockNode before any non-locking read of the transaction.
	GPULockNode(ctx context.Context, nodeID string) ([]GPUCapacity, error)
	// GPULockAll is GPULockNode of every node at once (rows locked in node and index order,
	// the order a single node's lock takes too): the scheduler places across nodes.
	GPULockAll(ctx context.Context) ([]GPUCapacity, error)
}

package wire

import (
	"encoding/json"
	"time"
)

// Lease modes.
const (
	LeaseModeGPU = "gpu"
	LeaseModeCPU = "cpu"
)

// Lease states.
const (
	LeaseActive   = "active"
	LeaseReleased = "released"
	LeaseExpired  = "expired"
)

// Error codes of lease answers (ErrorDetail.Code).
const (
	// CodeNoCapacity (409): no GPU of the node has the memory free.
	CodeNoCapacity = "no_capacity"
	// CodeNodeUnknown (409): the node never reported telemetry (or has no GPU).
	CodeNodeUnknown = "node_unknown"
	// CodeTelemetryStale (409): the node's telemetry is too old to place on.
	CodeTelemetryStale = "telemetry_stale"
	// CodeLeaseExpired: a heartbeat or release of an expired lease (410), or a completion
	// whose every result carries an expired lease (409).
	CodeLeaseExpired = "lease_expired"
	// CodeLeaseReleased (410): a heartbeat of a released lease.
	CodeLeaseReleased = "lease_released"
	// CodeLeaseBoundToJob (409): a release of a job's lease; cancel the job instead.
	CodeLeaseBoundToJob = "lease_bound_to_job"
)

// LeaseRequest is the body of POST /leases.
type LeaseRequest struct {
	// Agent holds the lease; an agent token may name only its own agent (filled in when empty).
	Agent string `json:"agent,omitempty"`
	// NodeID is the node to place on (default: the answering orchestrator's node).
	NodeID string `json:"node_id,omitempty"`
	// MinMemoryMB is the GPU memory needed (gpu mode: at least 1).
	MinMemoryMB int64 `json:"min_memory_mb"`
	// TTLSeconds is the lease's time to live, 1..86400 (0: the server's default).
	TTLSeconds int `json:"ttl_seconds,omitempty"`
	// Mode is gpu (default) or cpu.
	Mode string `json:"mode,omitempty"`
	// Exclusive takes a whole GPU: nothing else is placed on it while the lease is active.
	Exclusive bool `json:"exclusive,omitempty"`
	// Metadata is any JSON object kept with the lease.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// LeaseGrant answers a granted POST /leases (201). A denial is a 409 whose ErrorDetail.Code is
// CodeNoCapacity, CodeNodeUnknown or CodeTelemetryStale.
type LeaseGrant struct {
	Granted  bool   `json:"granted"`
	Token    string `json:"token"`
	Mode     string `json:"mode"`
	NodeID   string `json:"node_id"`
	GPUIndex *int   `json:"gpu_index"`
	// GPUIndexes are all the GPUs of a gpu lease, GPUIndex first.
	GPUIndexes []int     `json:"gpu_indexes,omitempty"`
	MemoryMB   int64     `json:"memory_mb"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// Lease is a lease as the API shows it.
type Lease struct {
	Token    string `json:"token"`
	Agent    string `json:"agent"`
	JobID    string `json:"job_id,omitempty"`
	NodeID   string `json:"node_id"`
	GPUIndex *int   `json:"gpu_index"`
	// GPUIndexes are all the GPUs of a gpu lease, GPUIndex first; MemoryMB is reserved on each.
	GPUIndexes    []int           `json:"gpu_indexes,omitempty"`
	Mode          string          `json:"mode"`
	MemoryMB      int64           `json:"memory_mb"`
	Exclusive     bool            `json:"exclusive,omitempty"`
	TTL           Duration        `json:"ttl"`
	Status        string          `json:"status"`
	CreatedAt     time.Time       `json:"created_at"`
	ExpiresAt     time.Time       `json:"expires_at"`
	LastHeartbeat time.Time       `json:"last_heartbeat"`
	EndedAt       *time.Time      `json:"ended_at,omitempty"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
}

// LeaseList is the answer of GET /leases, newest first.
type LeaseList struct {
	Leases []Lease `json:"leases"`
}

// GPUTelemetry is one usable GPU of a node's telemetry.
type GPUTelemetry struct {
	Index          int     `json:"index"`
	UUID           string  `json:"uuid"`
	Name           string  `json:"name,omitempty"`
	MemoryTotalMB  int64   `json:"memory_total_mb"`
	MemoryUsedMB   int64   `json:"memory_used_mb"`
	UtilizationPct int     `json:"utilization_pct"`
	TemperatureC   int     `json:"temperature_c"`
	PowerWatts     float64 `json:"power_watts"`
	// MIG is the GPU's MIG mode, "enabled" or "disabled"; left out when unknown.
	MIG string `json:"mig,omitempty"`
}

// LostGPUTelemetry is a GPU the node counts but cannot use.
type LostGPUTelemetry struct {
	Index  int    `json:"index"`
	UUID   string `json:"uuid,omitempty"`
	Reason string `json:"reason"`
}

// NodeTelemetry is a node's GPU snapshot as a worker sends it.
type NodeTelemetry struct {
	NodeID string             `json:"node_id"`
	Taken  time.Time          `json:"taken"`
	Source string             `json:"source"` // nvml | simulated | none
	GPUs   []GPUTelemetry     `json:"gpus"`
	Lost   []LostGPUTelemetry `json:"lost,omitempty"`
	// DriverVersion and CUDAVersion are the GPU driver's version and the CUDA version it
	// supports, when known: the node's gpu.driver and gpu.cuda labels.
	DriverVersion string `json:"driver_version,omitempty"`
	CUDAVersion   string `json:"cuda_version,omitempty"`
}

// RenewRequest is the body of POST /internal/leases/renew: a worker renews the leases of its
// in-flight jobs and reports its node's telemetry.
type RenewRequest struct {
	WorkerID  string         `json:"worker_id"`
	NodeID    string         `json:"node_id,omitempty"`
	Tokens    []string       `json:"tokens"`
	Telemetry *NodeTelemetry `json:"telemetry,omitempty"`
}

// RenewedLease is a lease a renew call extended.
type RenewedLease struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// GoneLease is a token a renew call could not extend: the job it was for is no longer the
// worker's, and its handler should stop.
type GoneLease struct {
	Token  string `json:"token"`
	JobID  string `json:"job_id,omitempty"`
	Status string `json:"status"` // released | expired | unknown
}

// GPUReservation is what the active leases reserve on one GPU of the worker's node.
type GPUReservation struct {
	GPUIndex   int   `json:"gpu_index"`
	ReservedMB int64 `json:"reserved_mb"`
}

// RenewResponse answers a renew call.
type RenewResponse struct {
	Renewed  []RenewedLease   `json:"renewed"`
	Gone     []GoneLease      `json:"gone"`
	Reserved []GPUReservation `json:"reserved,omitempty"`
}

// GPU is one GPU as GET /gpus shows it: the latest telemetry, the leases' reservations, what
// placement would still hand out, and the telemetry's age.
type GPU struct {
	NodeID           string    `json:"node_id"`
	Index            int       `json:"gpu_index"`
	UUID             string    `json:"uuid"`
	Name             string    `json:"name"`
	MemoryTotalMB    int64     `json:"memory_total_mb"`
	MemoryUsedMB     int64     `json:"memory_used_mb"`
	MemoryReservedMB int64     `json:"memory_reserved_mb"`
	MemoryFreeMB     int64     `json:"memory_free_mb"`
	UtilizationPct   int       `json:"utilization_pct"`
	TemperatureC     int       `json:"temperature_c"`
	PowerWatts       float64   `json:"power_watts"`
	ActiveLeases     int       `json:"active_leases"`
	Exclusive        bool      `json:"exclusive,omitempty"`
	Lost             bool      `json:"lost,omitempty"`
	LostReason       string    `json:"lost_reason,omitempty"`
	Source           string    `json:"source"`
	UpdatedAt        time.Time `json:"updated_at"`
	AgeSeconds       float64   `json:"age_seconds"`
	Fresh            bool      `json:"fresh"`
}

// GPUList is the answer of GET /gpus.
type GPUList struct {
	GPUs []GPU `json:"gpus"`
}

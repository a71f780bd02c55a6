package client

import "github.com/gpuorch/orchestrator/wire"

// The wire types and constants live in package wire, which the API server and the worker share
// with this package; they are re-exported here so that the SDK's users need no second import.

// The wire types of jobs, claims, reports, errors and health.
type (
	// Duration is wire.Duration.
	Duration = wire.Duration
	// SubmitRequest is wire.SubmitRequest.
	SubmitRequest = wire.SubmitRequest
	// Resources are what a job asks of the GPUs of one node (SubmitRequest.Resources).
	Resources = wire.Resources
	// Constraints narrow the nodes a GPU job may be placed on (SubmitRequest.Constraints).
	Constraints = wire.Constraints
	// SubmitResponse is wire.SubmitResponse.
	SubmitResponse = wire.SubmitResponse
	// SubmitBatchRequest is wire.SubmitBatchRequest.
	SubmitBatchRequest = wire.SubmitBatchRequest
	// SubmitBatchResponse is wire.SubmitBatchResponse.
	SubmitBatchResponse = wire.SubmitBatchResponse
	// SubmitBatchResult is wire.SubmitBatchResult.
	SubmitBatchResult = wire.SubmitBatchResult
	// Job is wire.Job.
	Job = wire.Job
	// JobList is wire.JobList.
	JobList = wire.JobList
	// ClaimItem is wire.ClaimItem.
	ClaimItem = wire.ClaimItem
	// ClaimRequest is wire.ClaimRequest.
	ClaimRequest = wire.ClaimRequest
	// ClaimedJob is wire.ClaimedJob.
	ClaimedJob = wire.ClaimedJob
	// ClaimRefusal is wire.ClaimRefusal.
	ClaimRefusal = wire.ClaimRefusal
	// ClaimResponse is wire.ClaimResponse.
	ClaimResponse = wire.ClaimResponse
	// StartRequest is wire.StartRequest.
	StartRequest = wire.StartRequest
	// StartResponse is wire.StartResponse.
	StartResponse = wire.StartResponse
	// JobResult is wire.JobResult.
	JobResult = wire.JobResult
	// CompleteRequest is wire.CompleteRequest.
	CompleteRequest = wire.CompleteRequest
	// CompleteOutcome is wire.CompleteOutcome.
	CompleteOutcome = wire.CompleteOutcome
	// CompleteResponse is wire.CompleteResponse.
	CompleteResponse = wire.CompleteResponse
	// ErrorBody is wire.ErrorBody.
	ErrorBody = wire.ErrorBody
	// ErrorDetail is wire.ErrorDetail.
	ErrorDetail = wire.ErrorDetail
	// Health is wire.Health.
	Health = wire.Health
)

// The wire constants of jobs, claims, reports, errors and health.
const (
	SubmitBatchMax      = wire.SubmitBatchMax
	ReasonNotFound      = wire.ReasonNotFound
	ReasonNotPending    = wire.ReasonNotPending
	ReasonNotDue        = wire.ReasonNotDue
	ReasonRetryLater    = wire.ReasonRetryLater
	ReasonNotDelivered  = wire.ReasonNotDelivered
	ReasonOutOfScope    = wire.ReasonOutOfScope
	ResultDone          = wire.ResultDone
	ResultFailed        = wire.ResultFailed
	OutcomeDone         = wire.OutcomeDone
	OutcomeRetry        = wire.OutcomeRetry
	OutcomeDeadLetter   = wire.OutcomeDeadLetter
	OutcomeStale        = wire.OutcomeStale
	OutcomeLeaseExpired = wire.OutcomeLeaseExpired
)

// The wire types of pools and workers.
type (
	// PoolRequest is wire.PoolRequest.
	PoolRequest = wire.PoolRequest
	// Pool is wire.Pool.
	Pool = wire.Pool
	// PoolResponse is wire.PoolResponse.
	PoolResponse = wire.PoolResponse
	// PoolList is wire.PoolList.
	PoolList = wire.PoolList
	// PoolChange is wire.PoolChange.
	PoolChange = wire.PoolChange
	// EvictRequest is wire.EvictRequest.
	EvictRequest = wire.EvictRequest
	// DrainAllResponse is wire.DrainAllResponse.
	DrainAllResponse = wire.DrainAllResponse
	// ReconcileResponse is wire.ReconcileResponse.
	ReconcileResponse = wire.ReconcileResponse
	// Worker is wire.Worker.
	Worker = wire.Worker
	// RegisterWorkerRequest is wire.RegisterWorkerRequest.
	RegisterWorkerRequest = wire.RegisterWorkerRequest
	// WorkerHeartbeatRequest is wire.WorkerHeartbeatRequest.
	WorkerHeartbeatRequest = wire.WorkerHeartbeatRequest
	// WorkerInstruction is wire.WorkerInstruction.
	WorkerInstruction = wire.WorkerInstruction
)

// The wire constants of pools and workers.
const (
	PoolStarting     = wire.PoolStarting
	PoolRunning      = wire.PoolRunning
	PoolDraining     = wire.PoolDraining
	PoolStopped      = wire.PoolStopped
	PoolEvicted      = wire.PoolEvicted
	WorkerIdle       = wire.WorkerIdle
	WorkerExecuting  = wire.WorkerExecuting
	WorkerDraining   = wire.WorkerDraining
	WorkerOffline    = wire.WorkerOffline
	InstructionNone  = wire.InstructionNone
	InstructionDrain = wire.InstructionDrain
	InstructionStop  = wire.InstructionStop
)

// The wire types of leases and GPUs.
type (
	// LeaseRequest is wire.LeaseRequest.
	LeaseRequest = wire.LeaseRequest
	// LeaseGrant is wire.LeaseGrant.
	LeaseGrant = wire.LeaseGrant
	// Lease is wire.Lease.
	Lease = wire.Lease
	// LeaseList is wire.LeaseList.
	LeaseList = wire.LeaseList
	// GPUTelemetry is wire.GPUTelemetry.
	GPUTelemetry = wire.GPUTelemetry
	// LostGPUTelemetry is wire.LostGPUTelemetry.
	LostGPUTelemetry = wire.LostGPUTelemetry
	// NodeTelemetry is wire.NodeTelemetry.
	NodeTelemetry = wire.NodeTelemetry
	// RenewRequest is wire.RenewRequest.
	RenewRequest = wire.RenewRequest
	// RenewedLease is wire.RenewedLease.
	RenewedLease = wire.RenewedLease
	// GoneLease is wire.GoneLease.
	GoneLease = wire.GoneLease
	// GPUReservation is wire.GPUReservation.
	GPUReservation = wire.GPUReservation
	// RenewResponse is wire.RenewResponse.
	RenewResponse = wire.RenewResponse
	// GPU is wire.GPU.
	GPU = wire.GPU
	// GPUList is wire.GPUList.
	GPUList = wire.GPUList
)

// The wire constants of leases and GPUs.
const (
	LeaseModeGPU        = wire.LeaseModeGPU
	LeaseModeCPU        = wire.LeaseModeCPU
	LeaseActive         = wire.LeaseActive
	LeaseReleased       = wire.LeaseReleased
	LeaseExpired        = wire.LeaseExpired
	CodeNoCapacity      = wire.CodeNoCapacity
	CodeNodeUnknown     = wire.CodeNodeUnknown
	CodeTelemetryStale  = wire.CodeTelemetryStale
	CodeLeaseExpired    = wire.CodeLeaseExpired
	CodeLeaseReleased   = wire.CodeLeaseReleased
	CodeLeaseBoundToJob = wire.CodeLeaseBoundToJob
)

// The wire types of admission control.
type (
	// AdmissionPolicy is wire.AdmissionPolicy.
	AdmissionPolicy = wire.AdmissionPolicy
	// AdmissionPolicyUpdate is wire.AdmissionPolicyUpdate.
	AdmissionPolicyUpdate = wire.AdmissionPolicyUpdate
	// AdmissionStatus is wire.AdmissionStatus.
	AdmissionStatus = wire.AdmissionStatus
	// AdmissionGPUGate is wire.AdmissionGPUGate.
	AdmissionGPUGate = wire.AdmissionGPUGate
	// AdmissionNodePressure is wire.AdmissionNodePressure.
	AdmissionNodePressure = wire.AdmissionNodePressure
	// AdmissionQueue is wire.AdmissionQueue.
	AdmissionQueue = wire.AdmissionQueue
	// AdmissionLimiter is wire.AdmissionLimiter.
	AdmissionLimiter = wire.AdmissionLimiter
)

// The wire constants of admission control.
const (
	CodeRateLimited       = wire.CodeRateLimited
	CodeGPUPressure       = wire.CodeGPUPressure
	CodeQueueFull         = wire.CodeQueueFull
	CodeMaxPending        = wire.CodeMaxPending
	AdmissionDefaultAgent = wire.AdmissionDefaultAgent
	GateOpen              = wire.GateOpen
	GateClosed            = wire.GateClosed
)

// The wire types of the dead-letter queue.
type (
	// DeadLetter is wire.DeadLetter.
	DeadLetter = wire.DeadLetter
	// DeadLetterList is wire.DeadLetterList.
	DeadLetterList = wire.DeadLetterList
)

// The wire types of the cluster status.
type (
	// Status is wire.Status.
	Status = wire.Status
	// StatusLeader is wire.StatusLeader.
	StatusLeader = wire.StatusLeader
	// StatusQueue is wire.StatusQueue.
	StatusQueue = wire.StatusQueue
)

// The wire types of the event feeds.
type (
	// Event is wire.Event.
	Event = wire.Event
)

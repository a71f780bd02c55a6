package store

import (
	"context"
	"time"
)

// AdmissionDefaultAgent is the agent of the policy row that replaces the configured default
// policy at run time: the policy of every agent without a row of its own. "*" can never be a
// real agent's name (agent names are letters, digits and ._:-), so the row cannot clash.
const AdmissionDefaultAgent = "*"

// AdmissionPolicy is one row of admission_policies: how fast one agent may submit jobs and take
// leases, and how many unfinished jobs it may have.
type AdmissionPolicy struct {
	Agent string
	// RatePerSec is the sustained rate of the agent's token bucket (submits and lease requests
	// per second, fractions allowed).
	RatePerSec float64
	// Burst is how many requests the bucket admits at once after the agent was idle.
	Burst int
	// MaxPending caps the agent's non-terminal jobs (pending, claimed, running, failed); 0 means
	// no cap.
	MaxPending int
	// MaxGPUMemoryMB caps the GPU memory the agent holds at once in active gpu leases (its
	// running and placed jobs' and its own), each counting memory_mb on each of its GPUs; 0
	// means no cap. The default policy's applies to each agent without a row, not to all of
	// them together.
	MaxGPUMemoryMB int64
	// MaxGPUs caps the GPUs the agent holds at once: the sum of its active gpu leases' GPU
	// counts (two leases of one GPU count two); 0 means no cap.
	MaxGPUs int
	// Enabled says whether the bucket, MaxPending and the GPU quota apply to the agent. A
	// disabled policy exempts the agent from them all; the cluster-wide gates (GPU pressure,
	// queue depth) still apply, because they protect the cluster rather than share it.
	Enabled   bool
	UpdatedAt time.Time
}

// AdmissionExecutor is the operations on admission_policies, and the counts of
// orchestrator_jobs that admission control reads.
type AdmissionExecutor interface {
	// AdmissionPolicyUpsert inserts or replaces the policy of p.Agent, with updated_at =
	// p.UpdatedAt, and returns the row as stored.
	AdmissionPolicyUpsert(ctx context.Context, p AdmissionPolicy) (AdmissionPolicy, error)
	// AdmissionPolicyGet returns the policy of agent, or ErrNotFound.
	AdmissionPolicyGet(ctx context.Context, agent string) (AdmissionPolicy, error)
	// AdmissionPolicyList returns every policy, ordered by agent. The table holds one row per
	// agent with a policy of its own: a few hundred rows at most, read whole by every
	// orchestrator instance once per refresh interval.
	AdmissionPolicyList(ctx context.Context) ([]AdmissionPolicy, error)
	// AdmissionPolicyDelete deletes the policy of agent; ErrNotFound when it has none.
	AdmissionPolicyDelete(ctx context.Context, agent string) error
	// JobCountUnfinished counts the non-terminal jobs (pending, claimed, running, failed) of
	// agent, stopping at limit: the answer is min(count, limit), so that checking a cap never
	// reads more index entries than the cap itself (limit <= 0: no bound).
	JobCountUnfinished(ctx context.Context, agent string, limit int) (int, error)
	// JobCountPending returns the number of pending jobs (due or waiting for a retry's
	// backoff) of each of types, leaving out the jobs of excludeIDs (the submits an instance
	// is still writing, which it counts itself); a type without such jobs is absent from the
	// map.
	JobCountPending(ctx context.Context, types, excludeIDs []string) (map[string]int, error)
}

// UnfinishedJobStatuses are the job states that count against an agent's MaxPending: every
// state that is not Terminal.
func UnfinishedJobStatuses() []JobStatus {
	var out []JobStatus
	for _, s := range JobStatuses {
		if !s.Terminal() {
			out = append(out, s)
		}
	}
	return out
}

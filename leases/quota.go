package leases

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// An agent's GPU quota (its admission policy's max_gpus and max_gpu_memory_mb) caps what it
// holds at once in active gpu leases: its running jobs' leases, the scheduler's reservations
// for its placed jobs, and the leases it took itself. The scheduler checks it before placing
// a job (engine/quota.go), a grant here before inserting a lease; both read the agent's leases
// after locking every GPU row, so no concurrent placement or grant can slip past it.

// ReasonQuota is the waiting reason of a GPU job, and the API's error code for a lease, that
// would take its agent past its GPU quota.
const ReasonQuota = "quota"

// QuotaRetryAfter is the Retry-After of a lease refused for its agent's quota: the agent's
// leases end by their holders' doing (a job's result, a release), which no clock here predicts,
// so a short fixed wait.
const QuotaRetryAfter = 5 * time.Second

// Quota is the most an agent may hold at once in active gpu leases; a zero field is no cap.
type Quota struct {
	// MaxMemoryMB caps the memory summed over the leases (memory_mb on each of a lease's GPUs).
	MaxMemoryMB int64
	// MaxGPUs caps the GPUs summed over the leases: two leases of one GPU count two, the
	// conservative reading (each is a share of a GPU the agent holds).
	MaxGPUs int
}

// Limited reports whether q caps anything.
func (q Quota) Limited() bool { return q.MaxMemoryMB > 0 || q.MaxGPUs > 0 }

// Need is what a lease of gpus GPUs reserving memoryMB on each adds to its agent's holding.
func Need(gpus int, memoryMB int64) store.GPUHolding {
	n := max(gpus, 1)
	return store.GPUHolding{GPUs: n, MemoryMB: memoryMB * int64(n)}
}

// Over says why taking need beside held would take agent past q ("" when it would not): the
// limit, what the agent holds, and what, named by what ("this job", "this lease"), needs.
func (q Quota) Over(agent string, held, need store.GPUHolding, what string) string {
	switch {
	case q.MaxGPUs > 0 && held.GPUs+need.GPUs > q.MaxGPUs:
		return fmt.Sprintf("agent %q holds %d of %d GPU(s) (max_gpus); %s needs %d", agent, held.GPUs, q.MaxGPUs,
			what, need.GPUs)
	case q.MaxMemoryMB > 0 && held.MemoryMB+need.MemoryMB > q.MaxMemoryMB:
		return fmt.Sprintf("agent %q holds %d of %d MB of GPU memory (max_gpu_memory_mb); %s needs %d MB", agent,
			held.MemoryMB, q.MaxMemoryMB, what, need.MemoryMB)
	}
	return ""
}

// QuotaError is a gpu lease refused because it would take its agent past its GPU quota. The
// API answers 429 with the code ReasonQuota and RetryAfter.
type QuotaError struct {
	Agent      string
	Message    string
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string { return ReasonQuota + ": " + e.Message }

// Quota returns the GPU quota of agent (Options.Quotas; none without it).
func (m *Manager) Quota(agent string) Quota {
	if m.quotas == nil {
		return Quota{}
	}
	mem, gpus := m.quotas(agent)
	return Quota{MaxMemoryMB: mem, MaxGPUs: gpus}
}

// LockNodeForQuota is LockNode for a placement under an agent's quota: it locks every node's
// GPU rows in tx, not only those of nodeID, so that a grant or claim of the agent on another
// node, or the scheduler's pass, waits for this transaction, and the agent's leases read after
// the lock are all it holds until the commit. Only placements for an agent with a quota pay
// for the wider lock. It returns nodeID's lock.
func (m *Manager) LockNodeForQuota(ctx context.Context, tx store.Tx, nodeID string, now time.Time) (*NodeLock, error) {
	c, err := m.LockCluster(ctx, tx, now)
	if err != nil {
		return nil, err
	}
	if n := c.Node(nodeID); n != nil {
		return n, nil
	}
	return newNodeLock(nodeID, nil, now, m.cfg), nil // no GPU there: Prepare denies node_unknown
}

// checkQuota refuses the lease l of agent when, beside the agent's active gpu leases, it would
// take the agent past q. Call it in the transaction that locked the GPU rows (LockNodeForQuota).
func checkQuota(ctx context.Context, tx store.Tx, q Quota, l store.Lease) error {
	held, err := tx.LeaseHoldings(ctx, []string{l.Agent})
	if err != nil {
		return err
	}
	if why := q.Over(l.Agent, held[l.Agent], Need(len(l.GPUIndexes), l.MemoryMB), "this lease"); why != "" {
		return &QuotaError{Agent: l.Agent, Message: why, RetryAfter: QuotaRetryAfter}
	}
	return nil
}

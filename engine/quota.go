package engine

import (
	"context"
	"time"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// The scheduler's side of the agents' GPU quotas (leases/quota.go has the rules). A pass reads
// what each agent with a quota holds once, after it has locked every GPU row, and adds what it
// places itself; a job that would take its agent past its quota waits with the reason "quota:
// …", holds no node and blocks no other agent's job. A quota lowered below what an agent holds
// stops its placements until its leases end; nothing running is touched.

// passQuotas are the quotas of the agents of one pass's jobs and what they hold.
type passQuotas struct {
	limits map[string]leases.Quota     // agents with a quota; the others are absent
	held   map[string]store.GPUHolding // what they hold, this pass's placements included
}

// quotasOf reads the quotas of the agents of jobs, once each: a policy changing under a pass
// or a claim applies to the next.
func (e *Engine) quotasOf(jobs []store.Job) *passQuotas {
	q := &passQuotas{limits: map[string]leases.Quota{}}
	for _, j := range jobs {
		if _, seen := q.limits[j.Agent]; seen {
			continue
		}
		if l := e.leases.Quota(j.Agent); l.Limited() {
			q.limits[j.Agent] = l
		}
	}
	return q
}

// load reads what the agents with a quota hold. tx must hold every GPU row locked
// (leases.LockCluster, LockNodeForQuota): no grant or placement can change it before tx
// commits. Without any quota it reads nothing.
func (q *passQuotas) load(ctx context.Context, tx store.Tx) error {
	if len(q.limits) == 0 {
		return nil
	}
	agents := make([]string, 0, len(q.limits))
	for a := range q.limits {
		agents = append(agents, a)
	}
	var err error
	q.held, err = tx.LeaseHoldings(ctx, agents)
	return err
}

// lockedQuotas is quotasOf the pass's jobs, loaded in tx after its GPU locks.
func (e *Engine) lockedQuotas(ctx context.Context, tx store.Tx, jobs []store.Job) (*passQuotas, error) {
	q := e.quotasOf(jobs)
	return q, q.load(ctx, tx)
}

// over says why placing j, reserving memoryMB on each of its GPUs, would take its agent past
// its quota: the waiting reason ("" when it would not, or when q is nil: no GPU job).
func (q *passQuotas) over(j *store.Job, memoryMB int64) string {
	if q == nil {
		return ""
	}
	limit, ok := q.limits[j.Agent]
	if !ok {
		return ""
	}
	why := limit.Over(j.Agent, q.held[j.Agent], leases.Need(j.GPUCount(), memoryMB), "this job")
	if why == "" {
		return ""
	}
	return leases.ReasonQuota + ": " + why
}

// add counts a lease the pass placed in its agent's holding.
func (q *passQuotas) add(l store.Lease) {
	if q == nil || l.Mode != store.LeaseGPU {
		return // a lease of a job without a GPU holds none
	}
	if _, ok := q.limits[l.Agent]; !ok {
		return
	}
	h := q.held[l.Agent]
	need := leases.Need(len(l.GPUIndexes), l.MemoryMB)
	h.GPUs, h.MemoryMB = h.GPUs+need.GPUs, h.MemoryMB+need.MemoryMB
	q.held[l.Agent] = h
}

// quotaWaits reports whether j waits for its agent's quota, and then records why. With node
// "" it checks j's request before any placement; on the node chosen for an exclusive j it
// checks what j would reserve there, its GPUs whole.
func (s *schedulePass) quotaWaits(j *store.Job, node string) bool {
	mb := int64(j.GPUMemoryMB)
	if node != "" {
		if !j.GPUExclusive {
			return false // the request's memory, checked already
		}
		r, err := s.cluster.Node(node).Reservation(leases.Request{MemoryMB: mb, GPUs: j.GPUCount(), Exclusive: true})
		if err != nil {
			return false // Prepare says why
		}
		mb = r
	}
	why := s.quotas.over(j, mb)
	if why == "" {
		return false
	}
	s.wait(j, why)
	return true
}

// lockClaimNode locks the GPU rows of the node a claim places its GPU jobs on: the node's
// alone, or, when an agent of those jobs has a quota, every node's (a grant's rule,
// leases.Manager.LockNodeForQuota); then it reads those agents' holdings. Without the
// scheduler (scheduler.disabled) this is where the quotas are kept.
func (e *Engine) lockClaimNode(ctx context.Context, tx store.Tx, nodeID string, claimable []candidate,
	now time.Time) (*leases.NodeLock, *passQuotas, error) {
	var jobs []store.Job
	for _, c := range claimable {
		if needsNode(c.job) {
			jobs = append(jobs, *c.job)
		}
	}
	q := e.quotasOf(jobs)
	lock := e.leases.LockNode
	if len(q.limits) > 0 {
		lock = e.leases.LockNodeForQuota
	}
	node, err := lock(ctx, tx, nodeID, now)
	if err != nil {
		return nil, nil, err
	}
	return node, q, q.load(ctx, tx)
}

// claimOver is over for a job a claim places on node ("" for a job it does not place): an
// exclusive job counts the whole GPUs it would reserve there.
func (q *passQuotas) claimOver(j *store.Job, node *leases.NodeLock) string {
	if q == nil || !needsNode(j) {
		return ""
	}
	mb := int64(j.GPUMemoryMB)
	if j.GPUExclusive {
		if r, err := node.Reservation(leases.Request{MemoryMB: mb, GPUs: j.GPUCount(), Exclusive: true}); err == nil {
			mb = r
		}
	}
	return q.over(j, mb)
}

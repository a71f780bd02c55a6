package engine

import (
	"context"

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

// lockedQuotas reads the quotas of the agents of jobs and, for those with one, their active gpu
// leases. tx must hold every GPU row locked (leases.LockCluster): no grant or placement can
// change what they hold before the pass commits. Without any quota it reads nothing.
func (e *Engine) lockedQuotas(ctx context.Context, tx store.Tx, jobs []store.Job) (*passQuotas, error) {
	q := &passQuotas{limits: map[string]leases.Quota{}}
	var agents []string
	for _, j := range jobs {
		if _, seen := q.limits[j.Agent]; seen {
			continue
		}
		// One reading per pass: a policy changing under it applies to the next.
		if l := e.leases.Quota(j.Agent); l.Limited() {
			q.limits[j.Agent] = l
			agents = append(agents, j.Agent)
		}
	}
	if len(agents) == 0 {
		return q, nil
	}
	var err error
	q.held, err = tx.LeaseHoldings(ctx, agents)
	return q, err
}

// over says why placing j, reserving memoryMB on each of its GPUs, would take its agent past
// its quota: the waiting reason ("" when it would not).
func (q *passQuotas) over(j *store.Job, memoryMB int64) string {
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

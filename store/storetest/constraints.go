package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// testConstraints: a job's constraints round-trip (nil stays nil); a job with constraints is
// the scheduler's (listed schedulable, counted unplaced, left out of a scheduled dispatch)
// whether or not it needs a GPU; LeaseJobsPerNode counts the jobs with an active lease per
// type, agent and node.
func testConstraints(t *testing.T, b *bundle) {
	ctx := t.Context()
	// 1991: no other subtest has jobs available this early.
	base := time.Date(1991, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(p *store.JobInsertParams) { p.AvailableAt, p.Now = base, base }
	c := &store.Constraints{NodeSelector: map[string]string{"tier": "prod"}, AllowNodes: []string{"a", "b"},
		DenyNodes: []string{"c"}, MaxPerNode: 2}
	con := b.insert(t, "con", at, func(p *store.JobInsertParams) { p.Type = b.prefix + "t"; p.Constraints = c })
	plain := b.insert(t, "plain", at, func(p *store.JobInsertParams) { p.Type = b.prefix + "t" })
	got, err := b.s.JobGet(ctx, con.ID)
	require.NoError(t, err)
	require.Equal(t, c, got.Constraints)
	require.True(t, got.Scheduled())
	got, err = b.s.JobGet(ctx, plain.ID)
	require.NoError(t, err)
	require.Nil(t, got.Constraints)
	require.False(t, got.Scheduled())

	now := base.Add(time.Second)
	sched, err := b.s.JobListSchedulable(ctx, store.SchedulableParams{Now: now, Limit: 100})
	require.NoError(t, err)
	require.Contains(t, ids(sched), con.ID)
	require.NotContains(t, ids(sched), plain.ID)
	// A GPU job behind a full batch of others is read too.
	gpu := b.insert(t, "gpu", at, func(p *store.JobInsertParams) { p.Type = b.prefix + "t"; p.GPUMemoryMB = 1000; p.Priority = 0 })
	con2 := b.insert(t, "con2", at, func(p *store.JobInsertParams) {
		p.Type, p.Constraints, p.Priority = b.prefix+"t", c, 9
	})
	sched, err = b.s.JobListSchedulable(ctx, store.SchedulableParams{Now: now, Limit: 1})
	require.NoError(t, err)
	require.Contains(t, ids(sched), con2.ID, "the highest priority")
	require.Contains(t, ids(sched), gpu.ID, "the GPU jobs by themselves")
	unplaced, err := b.s.JobCountUnplaced(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, unplaced[b.prefix+"t"])
	disp, err := b.s.JobListDispatchable(ctx, store.DispatchParams{Now: now, Limit: 100, Scheduled: true})
	require.NoError(t, err)
	require.Contains(t, ids(disp), plain.ID)
	require.NotContains(t, ids(disp), con.ID, "the scheduler's to place and publish")

	// Two leases of agent's jobs on node n1, one on n2, one ended: counted per node.
	lease := func(token, job, node string, status store.LeaseStatus) store.Lease {
		return store.Lease{Token: b.prefix + token, Agent: b.agent(), JobID: job, NodeID: node, Mode: store.LeaseCPU,
			TTL: time.Minute, Status: status, CreatedAt: base, ExpiresAt: base.Add(time.Minute), LastHeartbeat: base}
	}
	require.NoError(t, b.s.LeaseInsert(ctx, []store.Lease{
		lease("l1", con.ID, "n1", store.LeaseActive), lease("l2", plain.ID, "n1", store.LeaseActive),
		lease("l3", con.ID, "n2", store.LeaseActive), lease("l4", plain.ID, "n2", store.LeaseReleased),
	}))
	all, err := b.s.LeaseJobsPerNode(ctx)
	require.NoError(t, err)
	var counts []store.NodeJobCount
	for _, c := range all {
		if c.Type == b.prefix+"t" {
			counts = append(counts, c)
		}
	}
	// Pending (placed, unplaced here) jobs count by their target, not their last worker.
	require.ElementsMatch(t, []store.NodeJobCount{
		{Type: b.prefix + "t", Agent: b.agent(), Node: "n1", Jobs: 2},
		{Type: b.prefix + "t", Agent: b.agent(), Node: "n2", Jobs: 1},
	}, counts)
}

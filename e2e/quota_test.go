package e2e

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// quotaAdmission keeps admission control on (the agents' GPU quotas are its policies') while
// its GPU-pressure gate never refuses: the gate closes above the high watermark, and the
// pressure cannot exceed 100%. The test keeps the GPUs nearly full on purpose.
const quotaAdmission = "admission:\n  gpu_high_watermark_pct: 100\n  gpu_low_watermark_pct: 99\n  limiter_timeout: 10s\n"

// TestScheduleQuota: agent "quota-a", limited to one GPU (max_gpus 1), submits 50 short GPU
// jobs and agent "quota-b", without a quota, 10 longer ones, together, to one node of two
// simulated 24 GiB GPUs. Each job takes 8000 MB: three fit on a GPU, so without the quota a
// would run six at once. The lease rows, replayed in the order their transactions wrote
// (byAuditOrder), show that a never held more than one GPU (the sum of its active leases' GPU
// counts, two leases of one GPU counting two) at any point, that b ran several jobs at once
// beside a's, and every job is done.
func TestScheduleQuota(t *testing.T) {
	t.Parallel()
	c := newGPUClusterWith(t, quotaAdmission)
	c.startOrchestrator("orchestrator")
	c.startSimNode("worker-quota", "quota-node", "2x24576", 12, "gpu_sleep")
	ctx := context.Background()
	_, err := c.api.SetAdmissionPolicy(ctx, client.AdmissionPolicyUpdate{Agent: "quota-a", MaxGPUs: ptr(1)})
	require.NoError(t, err)

	const aJobs, bJobs = 50, 10
	var reqs []client.SubmitRequest
	for i := range aJobs {
		reqs = append(reqs, client.SubmitRequest{JobID: fmt.Sprintf("quota-a-%02d", i), Type: "gpu_sleep", Agent: "quota-a",
			Payload: []byte(`{"ms": 100}`), Resources: &client.Resources{GPUMemoryMB: 8000}})
	}
	for i := range bJobs {
		reqs = append(reqs, client.SubmitRequest{JobID: fmt.Sprintf("quota-b-%02d", i), Type: "gpu_sleep", Agent: "quota-b",
			Payload: []byte(`{"ms": 1500}`), Resources: &client.Resources{GPUMemoryMB: 8000}})
	}
	resp, err := c.api.SubmitBatch(ctx, client.SubmitBatchRequest{Jobs: reqs})
	require.NoError(t, err)
	require.Equal(t, aJobs+bJobs, resp.Created, "%+v", resp.Results)
	c.waitStatus("done", aJobs+bJobs, 3*time.Minute)

	ls := c.requireNoOverCommit()
	agents := c.leaseAgents()
	var a, b []leaseRow
	for _, l := range ls {
		switch agents[l.Token] {
		case "quota-a":
			a = append(a, l)
		case "quota-b":
			b = append(b, l)
		}
	}
	// At least one lease per job: a placement that expired unclaimed on a loaded machine is
	// followed by another, and counts while it was active like any lease.
	require.GreaterOrEqual(t, len(a), aJobs)
	require.GreaterOrEqual(t, len(b), bJobs)
	peakA, _ := peakGPUs(a, nil)
	require.Equal(t, 1, peakA, "a held at most one GPU at any point of the lease replay")
	peakB, overlapped := peakGPUs(b, a)
	require.GreaterOrEqual(t, peakB, 2, "b ran several jobs at once")
	require.True(t, overlapped, "b's jobs ran while a's did: a's quota did not hold b back")
	t.Logf("a: %d leases, at most %d GPU(s) held at once; b: %d leases, up to %d at once", len(a), peakA, len(b), peakB)
}

// peakGPUs replays ls in audit order and returns the most GPUs they held at once (the sum of
// the active leases' GPU counts), and whether any of them was active together with one of
// others.
func peakGPUs(ls, others []leaseRow) (peak int, overlapped bool) {
	type event struct {
		at    int64
		delta int // GPUs taken (+) or given back (−); 0 for others'
		other int // others' leases begun (+1) or ended (−1)
	}
	var evs []event
	for _, l := range ls {
		start, end := byAuditOrder(&l)
		evs = append(evs, event{start, len(l.GPUs), 0}, event{end, -len(l.GPUs), 0})
	}
	for _, l := range others {
		start, end := byAuditOrder(&l)
		evs = append(evs, event{at: start, other: 1}, event{at: end, other: -1})
	}
	// At one point the ends go first: a lease that ends when another begins left its GPU.
	slices.SortStableFunc(evs, func(x, y event) int {
		return cmp.Or(cmp.Compare(x.at, y.at), cmp.Compare(min(x.delta, x.other), min(y.delta, y.other)))
	})
	held, othersActive := 0, 0
	for _, ev := range evs {
		held += ev.delta
		othersActive += ev.other
		peak = max(peak, held)
		overlapped = overlapped || (held > 0 && othersActive > 0)
	}
	return peak, overlapped
}

// leaseAgents returns the agent of every GPU lease, by token.
func (c *cluster) leaseAgents() map[string]string {
	rows, err := c.db.Query(`SELECT token, agent_name FROM orchestrator_leases WHERE mode = 'gpu'`)
	require.NoError(c.t, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var token, agent string
		require.NoError(c.t, rows.Scan(&token, &agent))
		out[token] = agent
	}
	require.NoError(c.t, rows.Err())
	return out
}

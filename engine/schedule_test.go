package engine_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// worker registers a live worker of the "gpu" type on node.
func (b *bundle) worker(t *testing.T, id, node string) {
	t.Helper()
	now := b.clock.Now()
	require.NoError(t, b.store.WorkerUpsert(context.Background(), store.Worker{ID: id, NodeID: node, Types: []string{"gpu"},
		Status: store.WorkerIdle, RegisteredAt: now, LastHeartbeat: now}))
}

// submitGPU submits a job of type "gpu" with resources (nil: the type's).
func (b *bundle) submitGPU(t *testing.T, id string, r *engine.Resources) {
	t.Helper()
	_, _, err := b.eng.Submit(context.Background(), engine.SubmitParams{JobID: id, Type: "gpu", Agent: "tester",
		Payload: json.RawMessage(`{}`), Actor: "agent:tester", Resources: r})
	require.NoError(t, err)
	b.eng.FlushMarks(context.Background())
}

// onBothStores runs test as parallel subtests on MariaDB and on the embedded mode's SQLite.
func onBothStores(t *testing.T, test func(t *testing.T, b *bundle)) {
	t.Helper()
	for name, setup := range map[string]func(*testing.T) *bundle{"MariaDB": setup, "SQLite": setupSQLite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, setup(t))
		})
	}
}

func (b *bundle) schedule(t *testing.T, p engine.ScheduleParams) engine.ScheduleResult {
	t.Helper()
	res, err := b.eng.Schedule(context.Background(), p)
	require.NoError(t, err)
	return res
}

// TestSchedule places GPU jobs across two nodes on MariaDB and on the embedded mode's SQLite:
// best fit, a claim that adopts the placement's lease on its node only, a placement that
// expires unclaimed going back to the scheduler with no attempt spent, and a node held for the
// first job in line that fits nowhere.
func TestSchedule(t *testing.T) {
	t.Parallel()
	onBothStores(t, testSchedule)
}

// TestScheduleOrder: jobs that became available at the same instant go largest first; a job
// that became available later waits behind them whatever its size, and a higher priority goes
// before both.
func TestScheduleOrder(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		b.gpuType(10000, 3)
		b.report(t, "n", 81920) // 81408 MB grantable: any two of the jobs below overflow it
		b.worker(t, "w", "n")
		// One instant: small first by id, the larger ones after it.
		b.submitGPU(t, "a-small", &engine.Resources{GPUMemoryMB: 42000})
		b.submitGPU(t, "b-two", &engine.Resources{GPUMemoryMB: 45000})
		b.submitGPU(t, "c-large", &engine.Resources{GPUMemoryMB: 50000})
		b.clock.Add(time.Millisecond)
		b.submitGPU(t, "d-later", &engine.Resources{GPUMemoryMB: 60000})

		p9 := 9
		_, _, err := b.eng.Submit(context.Background(), engine.SubmitParams{JobID: "f-urgent", Type: "gpu", Agent: "tester",
			Payload: json.RawMessage(`{}`), Actor: "agent:tester", Resources: &engine.Resources{GPUMemoryMB: 41000}, Priority: &p9})
		require.NoError(t, err)
		b.eng.FlushMarks(context.Background())

		// One job at a time fits: each pass places the next in line, run to done before the
		// next pass.
		var order []string
		for range 5 {
			res := b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
			require.Len(t, res.Placed, 1, "after %v", order)
			id := res.Placed[0].JobID
			order = append(order, id)
			c := b.claimOn(t, "w", "n", id)
			require.Len(t, c.Claimed, 1)
			done, err := b.eng.Complete(context.Background(), engine.CompleteParams{WorkerID: "w", Results: []engine.Result{
				{JobID: id, Attempt: 1, LeaseToken: c.Leases[id].Token, Done: true},
			}})
			require.NoError(t, err)
			require.Equal(t, engine.OutcomeDone, done.Outcomes[0].Outcome)
		}
		require.Equal(t, []string{"f-urgent", "c-large", "b-two", "a-small", "d-later"}, order,
			"the higher priority first; then of the jobs that arrived together the largest first; the later one last")
	})
}

func testSchedule(t *testing.T, b *bundle) {
	ctx := context.Background()
	b.gpuType(30000, 3)
	b.report(t, "small", 24576)
	b.report(t, "big", 81920)
	b.worker(t, "w-small", "small")
	b.worker(t, "w-big", "big")

	// Nothing is published before the scheduler places it.
	for _, id := range []string{"j1", "j2", "j3"} {
		b.submitGPU(t, id, nil)
	}
	n, err := b.streams.Len(ctx, "gpu")
	require.NoError(t, err)
	require.Zero(t, n, "GPU jobs wait for the scheduler, not in the type's stream")

	res := b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
	require.Len(t, res.Placed, 2, "two 30000 MB jobs fit the 81920 MB GPU, none the 24576 MB one")
	for _, p := range res.Placed {
		require.Equal(t, "big", p.Node)
	}
	require.Equal(t, map[string]int{"no_capacity": 1}, res.Waiting)
	require.Equal(t, 2, res.Published)
	n, err = b.streams.Len(ctx, streams.NodeStream("gpu", "big"))
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "published to the node's stream of the type")
	j3 := b.job(t, "j3")
	require.Contains(t, j3.WaitingReason, "no_capacity: needs 30000 MB on 1 GPU(s) of one node; the most free is")
	j1 := b.job(t, "j1")
	require.Equal(t, "big", j1.PlacedNode)
	require.Equal(t, store.JobPending, j1.Status)
	placement := b.lease(t, j1.LeaseToken)
	require.Equal(t, "j1", placement.JobID)
	require.Equal(t, store.LeaseActive, placement.Status)
	require.Contains(t, b.auditTypes(t, "j1"), engine.EventPlaced)

	// A worker of another node is refused; one of the node adopts the placement's lease.
	got := b.claimOn(t, "w-small", "small", "j1")
	require.Empty(t, got.Claimed)
	require.Equal(t, engine.RefusedPlacedElsewhere, got.Refused[0].Reason)
	b.clock.Add(time.Second)
	got = b.claimOn(t, "w-big", "big", "j1")
	require.Len(t, got.Claimed, 1)
	require.Equal(t, placement.Token, got.Claimed[0].LeaseToken)
	require.Empty(t, got.Claimed[0].PlacedNode, "claimed: no longer placed")
	require.True(t, got.Leases["j1"].ExpiresAt.After(placement.ExpiresAt), "renewed from the claim")

	// j2's placement expires unclaimed: the job is the scheduler's again, no attempt spent.
	b.clock.Add(time.Minute)
	j2 := b.job(t, "j2")
	purged, err := b.eng.ExpireLease(ctx, nil, b.lease(t, j2.LeaseToken), b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 1, purged.Expired)
	j2 = b.job(t, "j2")
	require.Equal(t, store.JobPending, j2.Status)
	require.Zero(t, j2.Attempts)
	require.Empty(t, j2.LeaseToken)
	require.Empty(t, j2.PlacedNode)
	require.Contains(t, j2.WaitingReason, "placement_expired")
	require.Contains(t, b.auditTypes(t, "j2"), engine.EventUnplaced)

	// The telemetry went stale meanwhile; fresh again, j2 and j3 compete for the room j1
	// leaves: j2, earlier, gets it, and j3, in line first after it and waiting, holds the node.
	b.report(t, "small", 24576)
	b.report(t, "big", 81920)
	res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Nanosecond})
	require.Len(t, res.Placed, 1)
	require.Equal(t, "j2", res.Placed[0].JobID)
	require.Equal(t, engine.Hold{JobID: "j3", Node: "big"}, res.Held)
	require.Contains(t, b.job(t, "j3").WaitingReason, `node "big" is held for it`)

	// A small job behind it fits both nodes; best fit would take big, held for j3.
	b.submitGPU(t, "small-1", &engine.Resources{GPUMemoryMB: 1000})
	res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Nanosecond, Held: res.Held})
	require.Len(t, res.Placed, 1)
	require.Equal(t, engine.Placement{JobID: "small-1", Type: "gpu", Node: "small", GPUs: []int{0},
		Waited: res.Placed[0].Waited}, res.Placed[0])
	require.Equal(t, engine.Hold{JobID: "j3", Node: "big"}, res.Held)

	// A request that only a node without a live worker of its type could hold (one whose
	// workers left) waits as unsatisfiable, with an event.
	b.report(t, "left", 81920, 81920)
	b.clock.Add(6 * time.Second) // the submit's check reads the cluster's shape again
	b.submitGPU(t, "huge", &engine.Resources{GPUMemoryMB: 70000, GPUs: 2})
	res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
	require.Equal(t, 1, res.Waiting[leases.ReasonUnsatisfiable])
	require.Contains(t, b.job(t, "huge").WaitingReason, "unsatisfiable: needs 2 GPUs of one node")
	require.Contains(t, b.auditTypes(t, "huge"), engine.EventUnsatisfiable)
}

// quotas is a test's GPU quota lookup (leases.Options.Quotas), changed while it runs.
type quotas struct {
	mu sync.Mutex
	by map[string]leases.Quota
}

func (q *quotas) set(agent string, l leases.Quota) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.by[agent] = l
}

func (q *quotas) lookup(agent string) (int64, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.by[agent]
	return l.MaxMemoryMB, l.MaxGPUs
}

// withQuotas rebuilds b's engine over a lease manager that reads q.
func (b *bundle) withQuotas(t *testing.T) *quotas {
	t.Helper()
	q := &quotas{by: map[string]leases.Quota{}}
	b.leases = engine.NewLeaseManager(b.store, b.cfg, leases.Options{Now: b.clock.Now, Quotas: q.lookup})
	b.eng = engine.New(b.store, b.streams, b.cfg, engine.Options{Now: b.clock.Now, Leases: b.leases})
	eng := b.eng
	t.Cleanup(func() { eng.FlushMarks(context.Background()) })
	return q
}

// submitAs submits a job of type "gpu" of agent with resources (nil: the type's).
func (b *bundle) submitAs(t *testing.T, agent, id string, r *engine.Resources) {
	t.Helper()
	_, _, err := b.eng.Submit(context.Background(), engine.SubmitParams{JobID: id, Type: "gpu", Agent: agent,
		Payload: json.RawMessage(`{}`), Actor: "agent:" + agent, Resources: r})
	require.NoError(t, err)
	b.eng.FlushMarks(context.Background())
}

// TestScheduleQuota: an agent limited to one GPU gets one of its three jobs placed while two
// GPUs are free; the others wait "quota" without holding the other GPU, which another agent's
// job, behind them in line, gets. The agent's own lease counts too, an exclusive job counts
// the whole GPU it would reserve, and a quota lowered below what the agent holds stops its
// placements without touching what runs.
func TestScheduleQuota(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		q := b.withQuotas(t)
		ctx := context.Background()
		b.gpuType(10000, 3)
		b.report(t, "n", 40960, 40960)
		b.worker(t, "w", "n")
		q.set("a", leases.Quota{MaxGPUs: 1})

		for _, id := range []string{"a1", "a2", "a3"} {
			b.submitAs(t, "a", id, nil)
		}
		b.clock.Add(time.Millisecond) // b's job is behind a's in line
		b.submitAs(t, "b", "b1", &engine.Resources{GPUMemoryMB: 35000})
		res := b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Nanosecond})
		placed := map[string][]int{}
		for _, p := range res.Placed {
			placed[p.JobID] = p.GPUs
		}
		require.Len(t, placed, 2, "one job of a, and b's")
		require.Contains(t, placed, "a1")
		require.Equal(t, []int{1}, placed["b1"], "b's job gets the GPU a's waiting jobs did not hold")
		require.Equal(t, map[string]int{leases.ReasonQuota: 2}, res.Waiting)
		require.Equal(t, engine.Hold{}, res.Held, "a job waiting for its quota holds no node")
		require.Equal(t, `quota: agent "a" holds 1 of 1 GPU(s) (max_gpus); this job needs 1`, b.job(t, "a2").WaitingReason)

		// a1 runs; the next pass still places nothing of a's, and counts a1's lease.
		c := b.claimOn(t, "w", "n", "a1")
		require.Len(t, c.Claimed, 1)
		res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Nanosecond})
		require.Empty(t, res.Placed)
		require.Equal(t, 2, res.Waiting[leases.ReasonQuota])

		// Done: a's next job is placed, one only.
		done, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w", Results: []engine.Result{
			{JobID: "a1", Attempt: 1, LeaseToken: c.Leases["a1"].Token, Done: true}}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeDone, done.Outcomes[0].Outcome)
		res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Nanosecond})
		require.Len(t, res.Placed, 1)
		require.Equal(t, "a2", res.Placed[0].JobID)
		require.Equal(t, 1, res.Waiting[leases.ReasonQuota])

		// A quota lowered below what a holds: nothing more is placed, nothing is taken away.
		q.set("a", leases.Quota{MaxMemoryMB: 5000})
		res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Nanosecond})
		require.Empty(t, res.Placed)
		require.Equal(t, `quota: agent "a" holds 10000 of 5000 MB of GPU memory (max_gpu_memory_mb); this job needs 10000 MB`,
			b.job(t, "a3").WaitingReason)
		require.Equal(t, store.LeaseActive, b.lease(t, b.job(t, "a2").LeaseToken).Status, "a2's placement stands")

		// The agent's own lease counts as its jobs' do: running jobs and leases together.
		q.set("d", leases.Quota{MaxGPUs: 1})
		own, err := b.leases.Grant(ctx, leases.GrantParams{Agent: "d", NodeID: "n", Mode: store.LeaseGPU, MemoryMB: 100,
			Actor: "agent:d"})
		require.NoError(t, err)
		b.submitAs(t, "d", "d1", &engine.Resources{GPUMemoryMB: 100})
		res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Nanosecond})
		require.Empty(t, res.Placed)
		require.Equal(t, `quota: agent "d" holds 1 of 1 GPU(s) (max_gpus); this job needs 1`, b.job(t, "d1").WaitingReason)
		_, err = b.leases.Release(ctx, own.Token, "d", "agent:d")
		require.NoError(t, err)
		res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Nanosecond})
		require.Len(t, res.Placed, 1)
		require.Equal(t, "d1", res.Placed[0].JobID)

		// An exclusive job counts the whole GPU it would reserve (40960 − the margin), not its
		// request.
		q.set("c", leases.Quota{MaxMemoryMB: 20000})
		b.submitAs(t, "c", "c-whole", &engine.Resources{GPUMemoryMB: 1000, Exclusive: true})
		b.report(t, "m", 40960)
		b.worker(t, "w-m", "m")
		res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Nanosecond})
		require.Empty(t, res.Placed)
		require.Contains(t, b.job(t, "c-whole").WaitingReason, `quota: agent "c" holds 0 of 20000 MB of GPU memory (max_gpu_memory_mb); this job needs`)
	})
}

// TestClaimQuota: without the scheduler's placement, a worker's claim keeps the agents' GPU
// quotas itself: of two jobs of an agent limited to one GPU claimed at once, one is refused
// retry_later (quota), with its waiting reason, until the other is done.
func TestClaimQuota(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		q := b.withQuotas(t)
		b.gpuType(10000, 3)
		b.report(t, "n", 40960, 40960)
		q.set("a", leases.Quota{MaxGPUs: 1})
		b.submitAs(t, "a", "a1", nil)
		b.submitAs(t, "a", "a2", nil)
		b.submitAs(t, "b", "b1", nil)

		c := b.claimOn(t, "w", "n", "a1", "a2", "b1")
		require.Len(t, c.Claimed, 2)
		require.Contains(t, c.Leases, "a1")
		require.Contains(t, c.Leases, "b1", "another agent is not limited")
		require.Equal(t, []engine.Refusal{{JobID: "a2", Reason: engine.RefusedRetryLater, Detail: leases.ReasonQuota}}, c.Refused)
		require.Equal(t, `quota: agent "a" holds 1 of 1 GPU(s) (max_gpus); this job needs 1`, b.job(t, "a2").WaitingReason)

		done, err := b.eng.Complete(context.Background(), engine.CompleteParams{WorkerID: "w", Results: []engine.Result{
			{JobID: "a1", Attempt: 1, LeaseToken: c.Leases["a1"].Token, Done: true}}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeDone, done.Outcomes[0].Outcome)
		c = b.claimOn(t, "w", "n", "a2")
		require.Len(t, c.Claimed, 1, "%+v", c.Refused)
	})
}

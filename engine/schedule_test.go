package engine_test

import (
	"context"
	"encoding/json"
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
	for name, setup := range map[string]func(*testing.T) *bundle{"MariaDB": setup, "SQLite": setupSQLite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testSchedule(t, setup(t))
		})
	}
}

// TestScheduleOrder: jobs that became available at the same instant go largest first; a job
// that became available later waits behind them whatever its size, and a higher priority goes
// before both.
func TestScheduleOrder(t *testing.T) {
	t.Parallel()
	for name, setup := range map[string]func(*testing.T) *bundle{"MariaDB": setup, "SQLite": setupSQLite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
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

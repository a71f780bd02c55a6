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

// TestScheduleRouting: jobs routed to a model or a pool, on MariaDB and SQLite. Submit refuses
// a pool that does not exist or is another agent's, and a model no pool of the agent serves
// (422), unless the type lets such jobs wait; the scheduler places a routed job for a pool's workers (the node's stream of that
// pool), within the pool's free slots; a worker of another pool, or of none, on the same node
// is refused it; a job of a model no pool serves waits no_pool_for_model, with an event.
func TestScheduleRouting(t *testing.T) {
	t.Parallel()
	onBothStores(t, testScheduleRouting)
}

func testScheduleRouting(t *testing.T, b *bundle) {
	ctx := context.Background()
	now := b.clock.Now()
	for _, p := range []store.Pool{{ID: "p1", ModelID: "m1"}, {ID: "p2", ModelID: "m2"}} {
		p.Agent, p.Types, p.DesiredWorkers, p.Status = "x", []string{"noop"}, 1, store.PoolRunning
		p.CreatedAt, p.UpdatedAt, p.StartedAt, p.StatusChangedAt = now, now, now, now
		require.NoError(t, b.store.PoolInsert(ctx, p))
	}
	for _, w := range []store.Worker{
		{ID: "w-p1", PoolID: "p1", NodeID: "a", Concurrency: 2},
		{ID: "w-p2", PoolID: "p2", NodeID: "a", Concurrency: 2},
		{ID: "w-any", NodeID: "a", Concurrency: 4},
	} {
		w.Types, w.Status, w.RegisteredAt, w.LastHeartbeat = []string{"noop"}, store.WorkerIdle, now, now
		require.NoError(t, b.store.WorkerUpsert(ctx, w))
	}
	submit := func(id, pool, model string) error {
		_, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: id, Type: "noop", Agent: "x", Payload: json.RawMessage(`{}`),
			Actor: "agent:x", PoolID: pool, ModelID: model})
		return err
	}
	var unsat *engine.UnsatisfiableError
	require.ErrorAs(t, submit("bad-pool", "p9", ""), &unsat)
	require.Equal(t, "pool_id", unsat.Field)
	require.ErrorAs(t, submit("bad-pair", "p1", "m2"), &unsat)
	require.Equal(t, "model_id", unsat.Field)
	require.ErrorAs(t, submit("no-model", "", "m3"), &unsat)
	require.Contains(t, unsat.Message, `no pool of agent "x" serves model "m3" for type "noop"`)
	// Another agent's pools take none of its jobs.
	_, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: "other-pool", Type: "noop", Agent: "y", Payload: json.RawMessage(`{}`),
		Actor: "agent:y", PoolID: "p1"})
	require.ErrorAs(t, err, &unsat)
	require.Equal(t, "pool_id", unsat.Field)
	_, _, err = b.eng.Submit(ctx, engine.SubmitParams{JobID: "other-model", Type: "noop", Agent: "y", Payload: json.RawMessage(`{}`),
		Actor: "agent:y", ModelID: "m1"})
	require.ErrorAs(t, err, &unsat)
	require.Equal(t, "model_id", unsat.Field)
	b.cfg.JobTypes["noop"].WaitForModel = true
	require.NoError(t, submit("m3-1", "", "m3"))
	for _, id := range []string{"m1-1", "m1-2", "m1-3"} {
		require.NoError(t, submit(id, "", "m1"))
	}
	require.NoError(t, submit("p2-1", "p2", ""))
	b.eng.FlushMarks(ctx)

	res := b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
	placed := map[string]engine.Placement{}
	for _, p := range res.Placed {
		placed[p.JobID] = p
	}
	require.Len(t, placed, 3, "%+v", res)
	for _, id := range []string{"m1-1", "m1-2"} {
		require.Equal(t, "p1", placed[id].Pool, "model m1 is p1's")
		require.Equal(t, "a@p1", b.job(t, id).PlacedNode)
	}
	require.Equal(t, "p2", placed["p2-1"].Pool)
	require.Equal(t, 1, res.Waiting[leases.ReasonNoCapacity], "p1 has two slots")
	require.Contains(t, b.job(t, "m1-3").WaitingReason, "(a@p1: 0 of 2 free)")
	require.Equal(t, 1, res.Waiting[engine.ReasonNoPoolForModel])
	require.Contains(t, b.job(t, "m3-1").WaitingReason, `no_pool_for_model: no pool with a live worker of type noop serves model "m3"`)
	require.Contains(t, b.auditTypes(t, "m3-1"), engine.EventModelUnserved)
	n, err := b.streams.Len(ctx, streams.NodeStream("noop", "a@p1"))
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "published to p1's stream of node a")

	// The workers of another pool, or of none, on the node are refused the job.
	for _, w := range []store.Worker{{ID: "w-any", NodeID: "a"}, {ID: "w-p2", NodeID: "a", PoolID: "p2"}} {
		c, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: w.ID, PoolID: w.PoolID, NodeID: w.NodeID,
			Items: []engine.ClaimItem{{JobID: "m1-1", Stream: "noop"}}})
		require.NoError(t, err)
		require.Empty(t, c.Claimed)
		require.Equal(t, engine.RefusedPlacedElsewhere, c.Refused[0].Reason)
		require.Contains(t, c.Refused[0].Detail, "pool p1")
	}
	// A routed job not placed (a stale entry of it, say) is no worker's to take.
	stale, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w-any", NodeID: "a",
		Items: []engine.ClaimItem{{JobID: "m3-1", Stream: "noop"}}})
	require.NoError(t, err)
	require.Empty(t, stale.Claimed)
	require.Equal(t, "not placed: the scheduler places it", stale.Refused[0].Detail)
	c, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w-p1", PoolID: "p1", NodeID: "a",
		Items: []engine.ClaimItem{{JobID: "m1-1", Stream: "noop"}}})
	require.NoError(t, err)
	require.Len(t, c.Claimed, 1)
	require.Equal(t, "p1", b.job(t, "m1-1").OwnerPool)
}

// TestScheduleWarm: a job of a model goes first to a node where a worker of a pool serving it
// preloaded the model, even when a cold node has more free slots; with the warm node full, to
// the cold one.
func TestScheduleWarm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := b.clock.Now()
	require.NoError(t, b.store.PoolInsert(ctx, store.Pool{ID: "p1", ModelID: "m1", Agent: "x", Types: []string{"noop"},
		DesiredWorkers: 2, Status: store.PoolRunning, CreatedAt: now, UpdatedAt: now, StartedAt: now, StatusChangedAt: now}))
	for _, w := range []store.Worker{
		{ID: "cold", PoolID: "p1", NodeID: "a", Concurrency: 8},
		{ID: "warm", PoolID: "p1", NodeID: "b", Concurrency: 1, WarmModel: "m1"},
	} {
		w.Types, w.Status, w.RegisteredAt, w.LastHeartbeat = []string{"noop"}, store.WorkerIdle, now, now
		require.NoError(t, b.store.WorkerUpsert(ctx, w))
	}
	for _, id := range []string{"w1", "w2"} {
		_, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: id, Type: "noop", Agent: "x", Payload: json.RawMessage(`{}`),
			Actor: "agent:x", ModelID: "m1"})
		require.NoError(t, err)
	}
	b.eng.FlushMarks(ctx)
	res := b.schedule(t, engine.ScheduleParams{})
	require.Len(t, res.Placed, 2)
	require.Equal(t, "b", res.Placed[0].Node, "the warm node first")
	require.Equal(t, "a", res.Placed[1].Node, "the warm node's one slot is taken: the cold node")
}

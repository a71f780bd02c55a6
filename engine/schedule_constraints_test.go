package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// TestScheduleConstraints: the scheduler places a GPU job only on a node that passes its
// constraints (node selector, allow and deny lists, max_per_node per type and agent), on
// MariaDB and SQLite; a job that no live node passes now waits with a "constraints:" reason
// naming each node's refusal, and is placed once one passes.
func TestScheduleConstraints(t *testing.T) {
	t.Parallel()
	onBothStores(t, testScheduleConstraints)
}

func testScheduleConstraints(t *testing.T, b *bundle) {
	ctx := context.Background()
	b.gpuType(10000, 3)
	b.report(t, "a", 81920, 81920)
	b.report(t, "b", 81920, 81920)
	b.worker(t, "w-a", "a")
	b.worker(t, "w-b", "b")
	require.NoError(t, b.store.NodeUpsert(ctx, "a", map[string]string{"tier": "prod"}, b.clock.Now()))
	require.NoError(t, b.store.NodeUpsert(ctx, "b", map[string]string{"tier": "dev"}, b.clock.Now()))
	// Node c is registered, with no live worker yet.
	b.report(t, "c", 81920)
	require.NoError(t, b.store.NodeUpsert(ctx, "c", map[string]string{"tier": "staging"}, b.clock.Now()))
	submit := func(id, agent string, c *store.Constraints) {
		t.Helper()
		_, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: id, Type: "gpu", Agent: agent, Payload: json.RawMessage(`{}`),
			Actor: "agent:" + agent, Constraints: c})
		require.NoError(t, err)
		b.eng.FlushMarks(ctx)
	}
	// Best fit alone would put every job on a (first by id, and then the fuller).
	submit("prod", "x", &store.Constraints{NodeSelector: map[string]string{"tier": "prod"}})
	submit("not-a", "x", &store.Constraints{DenyNodes: []string{"a"}})
	submit("only-b", "x", &store.Constraints{AllowNodes: []string{"b"}})
	for _, id := range []string{"spread-1", "spread-2", "spread-3"} {
		submit(id, "y", &store.Constraints{MaxPerNode: 1})
	}
	submit("other-agent", "z", &store.Constraints{MaxPerNode: 1})
	submit("staging", "x", &store.Constraints{NodeSelector: map[string]string{"tier": "staging"}})

	res := b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
	on := map[string]string{}
	for _, p := range res.Placed {
		on[p.JobID] = p.Node
	}
	require.Equal(t, "a", on["prod"])
	require.Equal(t, "b", on["not-a"])
	require.Equal(t, "b", on["only-b"])
	require.NotEmpty(t, on["spread-1"])
	require.NotEmpty(t, on["spread-2"])
	require.NotEqual(t, on["spread-1"], on["spread-2"], "max_per_node 1: one of agent y's jobs a node")
	require.NotEmpty(t, on["other-agent"], "another agent's jobs do not count")
	require.NotContains(t, on, "spread-3")
	require.NotContains(t, on, "staging")
	require.Equal(t, 2, res.Waiting[engine.ReasonConstraints])

	why := b.job(t, "spread-3").WaitingReason
	require.True(t, strings.HasPrefix(why, "constraints: no node with a live worker of type gpu passes them now: "), why)
	require.Contains(t, why, "a (max_per_node: 1 of type gpu and agent y there)")
	require.Contains(t, b.job(t, "staging").WaitingReason, "a (node_selector), b (node_selector)")

	// spread-1 ends: its node takes spread-3.
	c := b.claimOn(t, "w-"+on["spread-1"], on["spread-1"], "spread-1")
	require.Len(t, c.Claimed, 1)
	done, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w-" + on["spread-1"], Results: []engine.Result{
		{JobID: "spread-1", Attempt: 1, LeaseToken: c.Leases["spread-1"].Token, Done: true},
	}})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeDone, done.Outcomes[0].Outcome)
	res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
	require.Len(t, res.Placed, 1)
	require.Equal(t, engine.Placement{JobID: "spread-3", Type: "gpu", Node: on["spread-1"], GPUs: res.Placed[0].GPUs,
		Waited: res.Placed[0].Waited}, res.Placed[0])

	// A worker starts on node c: the last job goes there.
	b.worker(t, "w-c", "c")
	res = b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
	require.Len(t, res.Placed, 1)
	require.Equal(t, "staging", res.Placed[0].JobID)
	require.Equal(t, "c", res.Placed[0].Node)
}

// TestScheduleCPUConstraints: a job that needs no GPU but has constraints is placed by the
// scheduler too, with a lease that reserves its node only, on the allowed node with the most
// free worker slots of its type (the workers' concurrency less the type's jobs leased there);
// with every slot taken it waits no_capacity, and a completion gives the slot to the next.
// Its entry goes to the node's stream, never the type's.
func TestScheduleCPUConstraints(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		now := b.clock.Now()
		for _, w := range []store.Worker{
			{ID: "w-a", NodeID: "a", Types: []string{"noop"}, Concurrency: 4},
			{ID: "w-b1", NodeID: "b", Types: []string{"noop"}, Concurrency: 1},
			{ID: "w-b2", NodeID: "b", Types: []string{"noop"}, Concurrency: 1},
		} {
			w.Status, w.RegisteredAt, w.LastHeartbeat = store.WorkerIdle, now, now
			require.NoError(t, b.store.WorkerUpsert(ctx, w))
			require.NoError(t, b.store.NodeUpsert(ctx, w.NodeID, map[string]string{"zone": "z"}, now))
		}
		for _, id := range []string{"c1", "c2", "c3"} {
			_, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: id, Type: "noop", Agent: "x", Payload: json.RawMessage(`{}`),
				Actor: "agent:x", Constraints: &store.Constraints{DenyNodes: []string{"a"}}})
			require.NoError(t, err)
		}
		b.eng.FlushMarks(ctx)
		n, err := b.streams.Len(ctx, "noop")
		require.NoError(t, err)
		require.Zero(t, n, "a job with constraints waits for the scheduler, not in the type's stream")

		res := b.schedule(t, engine.ScheduleParams{})
		require.Len(t, res.Placed, 2, "node b has two slots of noop")
		for _, p := range res.Placed {
			require.Equal(t, "b", p.Node)
			j := b.job(t, p.JobID)
			require.Equal(t, store.LeaseCPU, b.lease(t, j.LeaseToken).Mode)
		}
		require.Equal(t, 1, res.Waiting[leases.ReasonNoCapacity])
		waiting := "c3"
		require.Contains(t, b.job(t, waiting).WaitingReason, "has its worker slots taken (b: 0 of 2 free)")
		n, err = b.streams.Len(ctx, streams.NodeStream("noop", "b"))
		require.NoError(t, err)
		require.EqualValues(t, 2, n)

		first := res.Placed[0].JobID
		c := b.claimOn(t, "w-b1", "b", first)
		require.Len(t, c.Claimed, 1)
		require.Equal(t, b.job(t, first).LeaseToken, c.Claimed[0].LeaseToken, "the claim adopts the placement's lease")
		require.Empty(t, b.schedule(t, engine.ScheduleParams{}).Placed, "a running job holds its slot")
		done, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w-b1", Results: []engine.Result{
			{JobID: first, Attempt: 1, LeaseToken: c.Leases[first].Token, Done: true},
		}})
		require.NoError(t, err)
		require.Equal(t, engine.OutcomeDone, done.Outcomes[0].Outcome)
		res = b.schedule(t, engine.ScheduleParams{})
		require.Len(t, res.Placed, 1)
		require.Equal(t, engine.Placement{JobID: waiting, Type: "noop", Node: "b", Waited: res.Placed[0].Waited}, res.Placed[0])
	})
}

// TestScheduleSlotsShared: a worker's slots are shared by its types, so a worker of two types
// with one slot gets one scheduled job, not one of each; and the completion of a scheduled job
// that needs no GPU wakes the scheduler, whose next pass gives its slot to the other.
func TestScheduleSlotsShared(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wakes := 0
	b.eng = engine.New(b.store, b.streams, b.cfg, engine.Options{Now: b.clock.Now, Leases: b.leases,
		WakeScheduler: func() { wakes++ }})
	b.cfg.JobTypes["noop2"] = &config.JobType{Name: "noop2", Stream: "noop2", Handler: "noop", MaxAttempts: 3,
		Timeout: time.Minute, Backoff: b.cfg.JobTypes["noop"].Backoff}
	now := b.clock.Now()
	require.NoError(t, b.store.WorkerUpsert(ctx, store.Worker{ID: "w", NodeID: "a", Types: []string{"noop", "noop2"}, Concurrency: 1,
		Status: store.WorkerIdle, RegisteredAt: now, LastHeartbeat: now}))
	require.NoError(t, b.store.NodeUpsert(ctx, "a", map[string]string{"zone": "z"}, now))
	for id, typ := range map[string]string{"one": "noop", "two": "noop2"} {
		_, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: id, Type: typ, Agent: "x", Payload: json.RawMessage(`{}`),
			Actor: "agent:x", Constraints: &store.Constraints{AllowNodes: []string{"a"}}})
		require.NoError(t, err)
	}
	b.eng.FlushMarks(ctx)
	res := b.schedule(t, engine.ScheduleParams{})
	require.Len(t, res.Placed, 1, "one slot for both types")
	first := res.Placed[0]
	c, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w", NodeID: "a",
		Items: []engine.ClaimItem{{JobID: first.JobID, Stream: first.Type}}})
	require.NoError(t, err)
	require.Len(t, c.Claimed, 1)
	require.Empty(t, b.schedule(t, engine.ScheduleParams{}).Placed, "the running job holds the slot")
	before := wakes
	done, err := b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w", Results: []engine.Result{
		{JobID: first.JobID, Attempt: 1, LeaseToken: c.Leases[first.JobID].Token, Done: true},
	}})
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeDone, done.Outcomes[0].Outcome)
	require.Greater(t, wakes, before, "a scheduled job's completion wakes the scheduler")
	res = b.schedule(t, engine.ScheduleParams{})
	require.Len(t, res.Placed, 1)
	require.NotEqual(t, first.JobID, res.Placed[0].JobID)
}

package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// nodes registers nodes n1, n2, n3 (n1 and n2 with zone=a) with a live noop worker each.
func (b *bundle) nodes(t *testing.T) {
	t.Helper()
	ctx, now := context.Background(), b.clock.Now()
	for i, n := range []string{"n1", "n2", "n3"} {
		labels := map[string]string{"zone": "b"}
		if i < 2 {
			labels["zone"] = "a"
		}
		require.NoError(t, b.store.NodeUpsert(ctx, n, labels, now))
		require.NoError(t, b.store.WorkerUpsert(ctx, store.Worker{ID: "w-" + n, NodeID: n, Types: []string{"noop"},
			Status: store.WorkerIdle, Concurrency: 10, RegisteredAt: now, LastHeartbeat: now}))
	}
}

// fanOut submits a noop fan-out id.
func (b *bundle) fanOut(t *testing.T, id string, f *engine.FanOut) (store.Job, error) {
	t.Helper()
	job, _, err := b.eng.Submit(context.Background(), engine.SubmitParams{JobID: id, Type: "noop", Agent: "tester",
		Payload: json.RawMessage(`{"cmd":"upgrade"}`), Actor: "agent:tester", FanOut: f})
	b.eng.FlushMarks(context.Background())
	return job, err
}

// runChild has child's node's worker claim the placed child and report it.
func (b *bundle) runChild(t *testing.T, child string, done bool) {
	t.Helper()
	node := b.job(t, child).Constraints.AllowNodes[0]
	c, err := b.eng.Claim(context.Background(), engine.ClaimParams{WorkerID: "w-" + node, NodeID: node,
		Items: []engine.ClaimItem{{JobID: child, Stream: "noop"}}})
	require.NoError(t, err)
	require.Len(t, c.Claimed, 1, "claim %s on %s: %+v", child, node, c.Refused)
	_, err = b.eng.Complete(context.Background(), engine.CompleteParams{WorkerID: "w-" + node, Results: []engine.Result{{
		JobID: child, Attempt: 1, LeaseToken: c.Leases[child].Token, Done: done, NonRetryable: !done, Error: "boom on " + node,
		Output: json.RawMessage(fmt.Sprintf(`{"node":%q}`, node))}}})
	require.NoError(t, err)
}

// TestFanOut, on MariaDB and SQLite: a fan-out over three nodes runs one child pinned to each
// (the scheduler places each on its node) and the parent ends done with the three results;
// with fail_fast one failing child cancels the others, running ones included, and the parent
// fails; with continue every child runs and the parent fails after them; a selector picks the
// matching nodes; a cancel of the parent cancels its children; a failed parent is no replay.
func TestFanOut(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		b.nodes(t)
		parent, err := b.fanOut(t, "fo", &engine.FanOut{All: true})
		require.NoError(t, err)
		require.Equal(t, store.JobWaiting, parent.Status)
		require.Equal(t, store.FlowFanOut|store.FlowHasParents, parent.Flow)
		for _, n := range []string{"n1", "n2", "n3"} {
			c := b.job(t, "fo."+n)
			require.Equal(t, store.JobPending, c.Status)
			require.Equal(t, []string{n}, c.Constraints.AllowNodes)
		}
		res := b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
		require.Len(t, res.Placed, 3)
		for _, p := range res.Placed {
			require.Equal(t, p.JobID, "fo."+p.Node, "each child on its own node")
		}
		b.runChild(t, "fo.n1", true)
		b.runChild(t, "fo.n2", true)
		require.Equal(t, engine.ResolveResult{}, b.resolve(t), "n3 still going")
		b.runChild(t, "fo.n3", true)
		require.Equal(t, engine.ResolveResult{FanOutsDone: 1}, b.resolve(t))
		fo := b.job(t, "fo")
		require.Equal(t, store.JobDone, fo.Status)
		require.JSONEq(t, `{"strategy":"fail_fast","done":3,"failed":0,"cancelled":0,"nodes":{
			"n1":{"job_id":"fo.n1","status":"done","result":{"node":"n1"}},
			"n2":{"job_id":"fo.n2","status":"done","result":{"node":"n2"}},
			"n3":{"job_id":"fo.n3","status":"done","result":{"node":"n3"}}}}`, string(fo.Result))

		// fail_fast: n2 running, n3 placed; n1 fails: both cancelled, the parent fails.
		_, err = b.fanOut(t, "ff", &engine.FanOut{Nodes: []string{"n3", "n2", "n1"}})
		require.NoError(t, err)
		b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
		c, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w-n2", NodeID: "n2", Items: []engine.ClaimItem{{JobID: "ff.n2", Stream: "noop"}}})
		require.NoError(t, err)
		require.Len(t, c.Claimed, 1)
		b.runChild(t, "ff.n1", false)
		require.Equal(t, engine.ResolveResult{FanOutsFailed: 1, ChildrenCancelled: 2}, b.resolve(t))
		require.Equal(t, store.JobCancelled, b.job(t, "ff.n2").Status, "a running child is cancelled")
		require.Equal(t, store.JobCancelled, b.job(t, "ff.n3").Status)
		ff := b.job(t, "ff")
		require.Equal(t, store.JobDeadLetter, ff.Status)
		require.Contains(t, ff.LastError, "fan-out failed (fail_fast): 0 of 3 children done, 1 failed, 2 cancelled")
		require.Contains(t, b.auditTypes(t, "ff"), engine.TransitionEvent(store.JobFailed, store.JobDeadLetter))
		_, err = b.eng.Replay(ctx, "ff", "admin:x")
		require.ErrorIs(t, err, engine.ErrNotReplayable)

		// continue: the others run to their end.
		_, err = b.fanOut(t, "co", &engine.FanOut{All: true, Strategy: engine.StrategyContinue})
		require.NoError(t, err)
		b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
		b.runChild(t, "co.n1", false)
		require.Equal(t, engine.ResolveResult{}, b.resolve(t))
		b.runChild(t, "co.n2", true)
		b.runChild(t, "co.n3", true)
		require.Equal(t, engine.ResolveResult{FanOutsFailed: 1}, b.resolve(t))
		require.Contains(t, b.job(t, "co").LastError, "2 of 3 children done, 1 failed, 0 cancelled")

		// A selector picks the matching ready nodes; a cancel of the parent cancels them.
		_, err = b.fanOut(t, "sel", &engine.FanOut{NodeSelector: map[string]string{"zone": "a"}})
		require.NoError(t, err)
		require.Equal(t, "fo.n1", b.job(t, "fo.n1").ID)
		_, err = b.eng.Get(ctx, "sel.n3")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.eng.Cancel(ctx, "sel", "agent:tester")
		require.NoError(t, err)
		require.Equal(t, store.JobCancelled, b.job(t, "sel.n1").Status)
		require.Equal(t, store.JobCancelled, b.job(t, "sel.n2").Status)
	})
}

// TestFanOutRefused: a fan-out naming no mode or two, an unknown or cordoned node, or matching
// no ready node is refused naming the field.
func TestFanOutRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.nodes(t)
	_, err := b.store.NodeSetCordon(context.Background(), "n3", true, "maintenance", "admin:x", b.clock.Now())
	require.NoError(t, err)
	for _, tc := range []struct {
		name, field string
		unsat       bool
		f           engine.FanOut
	}{
		{"NoMode", "fan_out", false, engine.FanOut{}},
		{"TwoModes", "fan_out", false, engine.FanOut{All: true, Nodes: []string{"n1"}}},
		{"BadStrategy", "fan_out.strategy", false, engine.FanOut{All: true, Strategy: "yolo"}},
		{"Twice", "fan_out.nodes[1]", false, engine.FanOut{Nodes: []string{"n1", "n1"}}},
		{"Unknown", "fan_out.nodes[1]", true, engine.FanOut{Nodes: []string{"n1", "nx"}}},
		{"Cordoned", "fan_out.nodes[0]", true, engine.FanOut{Nodes: []string{"n3"}}},
		{"NoneMatch", "fan_out", true, engine.FanOut{NodeSelector: map[string]string{"zone": "z"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.fanOut(t, "", &tc.f)
			if tc.unsat {
				var ue *engine.UnsatisfiableError
				require.ErrorAs(t, err, &ue)
				require.Equal(t, tc.field, ue.Field, "%v", err)
				return
			}
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tc.field, ve.Field, "%v", err)
		})
	}
	// A cordoned node is not among all's.
	job, err := b.fanOut(t, "all", &engine.FanOut{All: true})
	require.NoError(t, err)
	require.Equal(t, store.JobWaiting, job.Status)
	_, err = b.eng.Get(context.Background(), "all.n3")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestFanOutPhases, on MariaDB and SQLite: a pipeline of two phases fanned out over three
// nodes: the second phase's children wait until the first phase succeeded on every node, then
// run with the first phase's results by node; a failure in the first phase cancels the second
// and fails the workflow.
func TestFanOutPhases(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		b.nodes(t)
		pipeline := func(id string) {
			fo := &engine.FanOut{All: true}
			s1, s2 := step("drain"), step("upgrade", "drain")
			s1.Job.FanOut, s2.Job.FanOut = fo, fo
			_, err := b.eng.SubmitWorkflow(ctx, engine.WorkflowParams{WorkflowID: id, Agent: "tester", Steps: fields(s1, s2)})
			require.NoError(t, err)
		}
		pipeline("p1")
		for _, n := range []string{"n1", "n2", "n3"} {
			require.Equal(t, store.JobPending, b.job(t, "p1.drain."+n).Status)
			require.Equal(t, store.JobWaiting, b.job(t, "p1.upgrade."+n).Status, "the barrier")
		}
		b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
		b.runChild(t, "p1.drain.n1", true)
		b.runChild(t, "p1.drain.n2", true)
		require.Equal(t, engine.ResolveResult{}, b.resolve(t), "drain has not succeeded everywhere")
		b.runChild(t, "p1.drain.n3", true)
		require.Equal(t, engine.ResolveResult{FanOutsDone: 1}, b.resolve(t), "drain ends")
		require.Equal(t, engine.ResolveResult{Released: 3}, b.resolve(t), "upgrade starts everywhere")
		b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
		node := "n2"
		c, err := b.eng.Claim(ctx, engine.ClaimParams{WorkerID: "w-" + node, NodeID: node,
			Items: []engine.ClaimItem{{JobID: "p1.upgrade.n2", Stream: "noop"}}})
		require.NoError(t, err)
		require.Len(t, c.Claimed, 1)
		parents := c.Parents["p1.upgrade.n2"]
		require.Len(t, parents, 1)
		require.Equal(t, "drain", parents[0].Step)
		require.JSONEq(t, `{"node":"n2"}`, string(mustGet(t, parents[0].Result, "nodes", "n2", "result")))
		_, err = b.eng.Complete(ctx, engine.CompleteParams{WorkerID: "w-n2", Results: []engine.Result{{JobID: "p1.upgrade.n2",
			Attempt: 1, LeaseToken: c.Leases["p1.upgrade.n2"].Token, Done: true}}})
		require.NoError(t, err)
		b.runChild(t, "p1.upgrade.n1", true)
		b.runChild(t, "p1.upgrade.n3", true)
		require.Equal(t, engine.ResolveResult{FanOutsDone: 1, WorkflowsEnded: 1}, b.resolve(t),
			"upgrade ends, and the workflow in the same pass")
		w, _, err := b.eng.GetWorkflow(ctx, "p1")
		require.NoError(t, err)
		require.Equal(t, store.WorkflowDone, w.Status)

		pipeline("p2")
		b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour})
		b.runChild(t, "p2.drain.n1", false)
		b.resolve(t) // drain fails fast: its other children are cancelled
		b.resolve(t) // upgrade's children follow their failed parent
		b.resolve(t) // and the workflow ends
		for _, n := range []string{"n1", "n2", "n3"} {
			require.Equal(t, store.JobCancelled, b.job(t, "p2.upgrade."+n).Status)
		}
		w, _, err = b.eng.GetWorkflow(ctx, "p2")
		require.NoError(t, err)
		require.Equal(t, store.WorkflowFailed, w.Status)
	})
}

// TestFanOutApproval: a fan-out that an approval policy matches is held as a whole: its
// children too, until the parent is approved (they are then scheduled); a child cannot be
// decided on its own.
func TestFanOutApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.nodes(t)
	_, err := b.eng.SetApprovalPolicy(context.Background(), store.ApprovalPolicy{Name: "fleet", Type: "noop"}, "admin:x")
	require.NoError(t, err)
	parent, err := b.fanOut(t, "fleet", &engine.FanOut{All: true})
	require.NoError(t, err)
	require.Equal(t, store.JobAwaitingApproval, parent.Status)
	require.Equal(t, store.JobAwaitingApproval, b.job(t, "fleet.n1").Status)
	require.Empty(t, b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour}).Placed, "held children are not placed")
	_, err = b.decide(t, "fleet.n1", "approver:ann", true)
	require.ErrorIs(t, err, engine.ErrNotAwaitingApproval)
	out, err := b.decide(t, "fleet", "approver:ann", true)
	require.NoError(t, err)
	require.Equal(t, store.JobWaiting, out.Job.Status)
	require.Equal(t, store.JobPending, b.job(t, "fleet.n3").Status)
	require.Len(t, b.schedule(t, engine.ScheduleParams{ReserveAfter: time.Hour}).Placed, 3)
}

// mustGet digs a value out of a JSON document.
func mustGet(t *testing.T, raw json.RawMessage, path ...string) json.RawMessage {
	t.Helper()
	for _, k := range path {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
		raw = m[k]
	}
	return raw
}

package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
)

// withWakes rebuilds b's engine with a WakeFlows that counts its calls.
func withWakes(b *bundle) *atomic.Int64 {
	var n atomic.Int64
	b.eng = engine.New(b.store, b.streams, b.cfg, engine.Options{Now: b.clock.Now, Leases: b.leases,
		WakeFlows: func() { n.Add(1) }})
	return &n
}

// submitDeps submits a noop job id that depends on parents (none: a plain job).
func (b *bundle) submitDeps(t *testing.T, id string, onFailure string, parents ...string) store.Job {
	t.Helper()
	job, created, err := b.eng.Submit(context.Background(), engine.SubmitParams{JobID: id, Type: "noop", Agent: "tester",
		Payload: json.RawMessage(`{}`), Actor: "agent:tester", DependsOn: parents, OnParentFailure: onFailure})
	require.NoError(t, err)
	require.True(t, created)
	b.eng.FlushMarks(context.Background())
	return job
}

// finishJob claims id and reports its end: done with result, or failed for good.
func (b *bundle) finishJob(t *testing.T, id string, done bool, result string) engine.ClaimResult {
	t.Helper()
	c := b.claim(t, "w", id)
	require.Len(t, c.Claimed, 1, "claim %s: %+v", id, c.Refused)
	r := engine.Result{JobID: id, Attempt: c.Claimed[0].Attempts, LeaseToken: c.Leases[id].Token, Done: done,
		Output: json.RawMessage(result), Error: "boom", NonRetryable: !done}
	_, err := b.eng.Complete(context.Background(), engine.CompleteParams{WorkerID: "w", Results: []engine.Result{r}})
	require.NoError(t, err)
	return c
}

// resolve runs one resolver pass without a fence.
func (b *bundle) resolve(t *testing.T) engine.ResolveResult {
	t.Helper()
	res, err := b.eng.ResolveFlows(context.Background(), nil, 100)
	require.NoError(t, err)
	return res
}

// TestFlowsDependsOn, on MariaDB and SQLite: a diamond of depends_on (A → B, C → D) runs in
// order, each child claiming with its parents' results; a failed parent cancels its
// dependents, and on_parent_failure run runs them anyway; the end of a job with dependents
// wakes the resolver, a plain job's does not.
func TestFlowsDependsOn(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		wakes := withWakes(b)
		a := b.submitDeps(t, "a", "")
		require.Equal(t, store.JobPending, a.Status)
		require.Zero(t, wakes.Load())
		bj := b.submitDeps(t, "b", "", "a")
		require.Equal(t, store.JobWaiting, bj.Status)
		require.Equal(t, int64(1), wakes.Load(), "a waiting job's submit wakes the resolver")
		b.submitDeps(t, "c", "", "a")
		b.submitDeps(t, "d", "", "b", "c")
		require.Equal(t, store.FlowHasDependents, b.job(t, "a").Flow)
		require.Equal(t, store.FlowHasParents|store.FlowHasDependents, b.job(t, "b").Flow)
		require.Equal(t, store.FlowHasParents, b.job(t, "d").Flow)
		ev := b.auditEvent(t, "d", engine.EventSubmitted)
		require.JSONEq(t, fmt.Sprintf(`{"agent":"tester","max_attempts":%d,"type":"noop","status":"waiting","depends_on":["b","c"]}`,
			b.cfg.JobTypes["noop"].MaxAttempts), string(ev.Details))

		require.Equal(t, engine.ResolveResult{}, b.resolve(t), "a has not ended")
		c := b.claim(t, "w", "b")
		require.Empty(t, c.Claimed, "a waiting job is never claimed")
		require.Equal(t, engine.RefusedNotPending, c.Refused[0].Reason)

		before := wakes.Load()
		ca := b.finishJob(t, "a", true, `{"a":1}`)
		require.Nil(t, ca.Parents, "a plain job's claim reads no parents")
		require.Greater(t, wakes.Load(), before, "a's end wakes the resolver")
		require.Equal(t, engine.ResolveResult{Released: 2}, b.resolve(t))
		require.Equal(t, store.JobPending, b.job(t, "b").Status)
		require.Equal(t, store.JobWaiting, b.job(t, "d").Status)
		require.Contains(t, b.auditTypes(t, "b"), engine.TransitionEvent(store.JobWaiting, store.JobPending))
		require.True(t, b.job(t, "b").Enqueued, "released jobs are published")

		cb := b.finishJob(t, "b", true, `{"b":2}`)
		require.Equal(t, []engine.Parent{{JobID: "a", Status: "done", Result: json.RawMessage(`{"a":1}`)}}, cb.Parents["b"])
		require.Equal(t, engine.ResolveResult{}, b.resolve(t), "d waits for c")
		b.finishJob(t, "c", true, `{"c":3}`)
		require.Equal(t, engine.ResolveResult{Released: 1}, b.resolve(t))
		cd := b.finishJob(t, "d", true, `{}`)
		require.Equal(t, []engine.Parent{
			{JobID: "b", Status: "done", Result: json.RawMessage(`{"b":2}`)},
			{JobID: "c", Status: "done", Result: json.RawMessage(`{"c":3}`)},
		}, cd.Parents["d"])

		// A failed parent cancels its dependents (and theirs, pass after pass); run runs anyway.
		b.submitDeps(t, "x", "")
		b.submitDeps(t, "y", "", "x", "a")
		b.submitDeps(t, "z", "", "y")
		b.submitDeps(t, "tolerant", engine.OnParentFailureRun, "x")
		b.finishJob(t, "x", false, "")
		require.Equal(t, store.JobDeadLetter, b.job(t, "x").Status)
		require.Equal(t, engine.ResolveResult{Released: 1, Cancelled: 1}, b.resolve(t))
		y := b.job(t, "y")
		require.Equal(t, store.JobCancelled, y.Status)
		require.Equal(t, "cancelled: parent x ended dead_letter", y.LastError)
		require.Equal(t, store.JobPending, b.job(t, "tolerant").Status)
		require.Equal(t, engine.ResolveResult{Cancelled: 1}, b.resolve(t), "z follows y")
		require.Equal(t, store.JobCancelled, b.job(t, "z").Status)
		ct := b.finishJob(t, "tolerant", true, `1`)
		require.Equal(t, []engine.Parent{{JobID: "x", Status: "dead_letter"}}, ct.Parents["tolerant"])

		// A parent already ended when the child is submitted.
		b.submitDeps(t, "late", "", "a")
		require.Equal(t, engine.ResolveResult{Released: 1}, b.resolve(t))
	})
}

// TestFlowsDependsOnRefused: unknown ids, another agent's job and cycles are 400s naming the
// field; a resubmit with other depends_on is a mismatch.
func TestFlowsDependsOnRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.submitDeps(t, "p", "")
	_, _, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: "other", Type: "noop", Agent: "someone", Payload: json.RawMessage(`1`)})
	require.NoError(t, err)
	for _, tc := range []struct {
		name, field string
		p           engine.SubmitParams
	}{
		{"Unknown", "depends_on[1]", engine.SubmitParams{DependsOn: []string{"p", "nope"}}},
		{"OtherAgents", "depends_on[0]", engine.SubmitParams{DependsOn: []string{"other"}}},
		{"Self", "depends_on[0]", engine.SubmitParams{JobID: "self", DependsOn: []string{"self"}}},
		{"Twice", "depends_on[1]", engine.SubmitParams{DependsOn: []string{"p", "p"}}},
		{"BadID", "depends_on[0]", engine.SubmitParams{DependsOn: []string{"a b"}}},
		{"OnFailureWithoutParents", "on_parent_failure", engine.SubmitParams{OnParentFailure: "run"}},
		{"OnFailureUnknown", "on_parent_failure", engine.SubmitParams{DependsOn: []string{"p"}, OnParentFailure: "maybe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.Type, p.Agent, p.Payload = "noop", "tester", json.RawMessage(`{}`)
			_, _, err := b.eng.Submit(ctx, p)
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tc.field, ve.Field, "%v", err)
		})
	}
	too := make([]string, engine.MaxDependsOn+1)
	for i := range too {
		too[i] = fmt.Sprintf("p%d", i)
	}
	_, _, err = b.eng.Submit(ctx, engine.SubmitParams{Type: "noop", Agent: "tester", Payload: json.RawMessage(`1`), DependsOn: too})
	require.ErrorContains(t, err, "over the limit")

	b.submitDeps(t, "child", "", "p")
	_, created, err := b.eng.Submit(ctx, engine.SubmitParams{JobID: "child", Type: "noop", Agent: "tester",
		Payload: json.RawMessage(`{}`), DependsOn: []string{"p"}})
	require.NoError(t, err)
	require.False(t, created, "the same request again")
	b.submitDeps(t, "q", "")
	_, _, err = b.eng.Submit(ctx, engine.SubmitParams{JobID: "child", Type: "noop", Agent: "tester",
		Payload: json.RawMessage(`{}`), DependsOn: []string{"q"}})
	var mm *engine.MismatchError
	require.ErrorAs(t, err, &mm)
	require.Equal(t, "depends_on", mm.Field)
}

// TestFlowsResolverFenced: a resolver whose fence refuses changes nothing.
func TestFlowsResolverFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.submitDeps(t, "p", "")
	b.submitDeps(t, "c", "", "p")
	b.finishJob(t, "p", true, `1`)
	fenced := func(context.Context, store.Tx) error { return store.ErrFenced }
	_, err := b.eng.ResolveFlows(context.Background(), fenced, 10)
	require.ErrorIs(t, err, store.ErrFenced)
	require.Equal(t, store.JobWaiting, b.job(t, "c").Status)
	require.Equal(t, engine.ResolveResult{Released: 1}, b.resolve(t))
}

// step is a noop workflow step.
func step(name string, needs ...string) engine.WorkflowStepParams {
	return engine.WorkflowStepParams{Name: name, Needs: needs, Job: engine.SubmitParams{Type: "noop", Payload: json.RawMessage(`{}`)}}
}

// fields names the steps as the API does.
func fields(steps ...engine.WorkflowStepParams) []engine.WorkflowStepParams {
	for i := range steps {
		steps[i].Field = fmt.Sprintf("steps[%d]", i)
	}
	return steps
}

// TestWorkflows, on MariaDB and SQLite: a diamond workflow (a → b, c → d) runs in order with d
// claiming b's and c's results and ends done; one whose b fails cancels d and ends failed; a
// cancel cancels the steps not ended; every change of the workflow is audited.
func TestWorkflows(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		diamond := func(id string) engine.WorkflowOutcome {
			out, err := b.eng.SubmitWorkflow(ctx, engine.WorkflowParams{WorkflowID: id, Agent: "tester", Actor: "agent:tester",
				Spec: json.RawMessage(`{"diamond":true}`), Steps: fields(step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c"))})
			require.NoError(t, err)
			b.eng.FlushMarks(ctx)
			return out
		}
		out := diamond("wf1")
		require.True(t, out.Created)
		require.Equal(t, store.WorkflowRunning, out.Workflow.Status)
		require.Equal(t, "wf1.d", out.Steps[3].JobID)
		require.Equal(t, store.JobPending, b.job(t, "wf1.a").Status)
		require.Equal(t, store.JobWaiting, b.job(t, "wf1.d").Status)
		again := diamond("wf1")
		require.False(t, again.Created, "a resubmit answers the workflow")
		require.Len(t, again.Steps, 4)

		b.finishJob(t, "wf1.a", true, `"A"`)
		require.Equal(t, engine.ResolveResult{Released: 2}, b.resolve(t))
		cb := b.finishJob(t, "wf1.b", true, `"B"`)
		require.Equal(t, []engine.Parent{{JobID: "wf1.a", Step: "a", Status: "done", Result: json.RawMessage(`"A"`)}}, cb.Parents["wf1.b"])
		require.Equal(t, store.JobWaiting, b.job(t, "wf1.d").Status, "d waits for c")
		b.finishJob(t, "wf1.c", true, `"C"`)
		require.Equal(t, engine.ResolveResult{Released: 1}, b.resolve(t))
		cd := b.finishJob(t, "wf1.d", true, `"D"`)
		require.Equal(t, []engine.Parent{
			{JobID: "wf1.b", Step: "b", Status: "done", Result: json.RawMessage(`"B"`)},
			{JobID: "wf1.c", Step: "c", Status: "done", Result: json.RawMessage(`"C"`)},
		}, cd.Parents["wf1.d"])
		require.Equal(t, engine.ResolveResult{WorkflowsEnded: 1}, b.resolve(t))
		w, steps, err := b.eng.GetWorkflow(ctx, "wf1")
		require.NoError(t, err)
		require.Equal(t, store.WorkflowDone, w.Status)
		require.NotNil(t, w.FinishedAt)
		for _, s := range steps {
			require.Equal(t, store.JobDone, s.JobStatus, s.Step)
		}
		require.Equal(t, []string{engine.EventWorkflowCreated, engine.EventWorkflowDone}, b.auditTypes(t, store.WorkflowAuditKey("wf1")))

		// b fails: d is cancelled, the workflow fails.
		diamond("wf2")
		b.finishJob(t, "wf2.a", true, `1`)
		b.resolve(t)
		b.finishJob(t, "wf2.b", false, "")
		b.finishJob(t, "wf2.c", true, `1`)
		require.Equal(t, engine.ResolveResult{Cancelled: 1, WorkflowsEnded: 1}, b.resolve(t))
		require.Equal(t, store.JobCancelled, b.job(t, "wf2.d").Status)
		w, _, err = b.eng.GetWorkflow(ctx, "wf2")
		require.NoError(t, err)
		require.Equal(t, store.WorkflowFailed, w.Status)

		// A cancel cancels what has not ended; a second one is refused.
		diamond("wf3")
		b.finishJob(t, "wf3.a", true, `1`)
		b.resolve(t)
		w, err = b.eng.CancelWorkflow(ctx, "wf3", "admin:x")
		require.NoError(t, err)
		require.Equal(t, store.WorkflowCancelled, w.Status)
		for _, id := range []string{"wf3.b", "wf3.c", "wf3.d"} {
			require.Equal(t, store.JobCancelled, b.job(t, id).Status, id)
		}
		require.Equal(t, store.JobDone, b.job(t, "wf3.a").Status)
		_, err = b.eng.CancelWorkflow(ctx, "wf3", "admin:x")
		require.ErrorIs(t, err, engine.ErrWorkflowEnded)
		require.Equal(t, engine.ResolveResult{}, b.resolve(t), "a cancelled workflow is not ended again")
	})
}

// TestWorkflowsRefused: a cycle, unknown or repeated needs, bad or duplicate names and a bad
// step are 400s naming the field; a resubmit with other steps is a mismatch, another agent's
// id a conflict.
func TestWorkflowsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bad := step("x")
	bad.Job.Type = "nope"
	for _, tc := range []struct {
		name, field string
		steps       []engine.WorkflowStepParams
	}{
		{"Cycle", "steps", fields(step("a", "c"), step("b", "a"), step("c", "b"))},
		{"SelfNeed", "steps[0].needs[0]", fields(step("a", "a"))},
		{"UnknownNeed", "steps[1].needs[0]", fields(step("a"), step("b", "z"))},
		{"NeedTwice", "steps[1].needs[1]", fields(step("a"), step("b", "a", "a"))},
		{"DuplicateName", "steps[1].name", fields(step("a"), step("a"))},
		{"BadName", "steps[0].name", fields(step("a.b"))},
		{"BadStep", "steps[1].type", fields(step("a"), bad)},
		{"NoSteps", "steps", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.eng.SubmitWorkflow(ctx, engine.WorkflowParams{Agent: "tester", Steps: tc.steps})
			var ve *engine.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tc.field, ve.Field, "%v", err)
		})
	}
	_, err := b.eng.SubmitWorkflow(ctx, engine.WorkflowParams{Agent: "tester", Steps: fields(step("a", "c"), step("b", "a"), step("c", "b"))})
	require.ErrorContains(t, err, "a -> c -> b -> a")

	p := engine.WorkflowParams{WorkflowID: "w", Agent: "tester", Spec: json.RawMessage(`{"v":1}`), Steps: fields(step("a"))}
	_, err = b.eng.SubmitWorkflow(ctx, p)
	require.NoError(t, err)
	p.Spec = json.RawMessage(`{"v":2}`)
	_, err = b.eng.SubmitWorkflow(ctx, p)
	var mm *engine.MismatchError
	require.ErrorAs(t, err, &mm)
	p.Agent, p.Spec = "intruder", json.RawMessage(`{"v":1}`)
	_, err = b.eng.SubmitWorkflow(ctx, p)
	require.ErrorIs(t, err, store.ErrConflict)
}

// TestFlowsRetention: once retention deleted a flow's jobs, their dependency rows and
// approval requests go too, and the ended workflow after the longest retention of a type.
func TestFlowsRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.eng.SubmitWorkflow(ctx, engine.WorkflowParams{WorkflowID: "old", Agent: "tester", Steps: fields(step("a"), step("b", "a"))})
	require.NoError(t, err)
	b.eng.FlushMarks(ctx)
	_, err = b.eng.SetApprovalPolicy(ctx, store.ApprovalPolicy{Name: "sleepy", Type: "sleep"}, "admin:x")
	require.NoError(t, err)
	b.submitTyped(t, "held", "sleep")
	_, err = b.decide(t, "held", "approver:ann", false)
	require.NoError(t, err)
	b.finishJob(t, "old.a", true, `1`)
	b.resolve(t)
	b.finishJob(t, "old.b", true, `2`)
	require.Equal(t, engine.ResolveResult{WorkflowsEnded: 1}, b.resolve(t))

	b.clock.Add(30 * day)
	res := b.retention(t, 100)
	require.Equal(t, 3, res.Jobs)
	require.False(t, b.exists(t, "old.b"))
	_, err = b.store.WorkflowGet(ctx, "old", false)
	require.ErrorIs(t, err, store.ErrNotFound)
	ps, err := b.store.JobParents(ctx, []string{"old.b"}, 0)
	require.NoError(t, err)
	require.Empty(t, ps, "the dependency rows of a deleted job are gone")
	_, err = b.store.ApprovalGet(ctx, "held", false)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.GreaterOrEqual(t, res.Flows, 3)
}

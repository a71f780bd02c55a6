package storetest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
)

// testJobFlows: the new states round-trip (awaiting_approval is 17 characters: MariaDB's status
// column must hold it), flow bits are added without touching anything else, dependency rows
// read back with their parents' status and results cut at the size asked, and the waiting
// jobs the resolver must decide on are exactly those whose parents all ended or (unless
// tolerant) one failed.
func testJobFlows(t *testing.T, b *bundle) {
	ctx := t.Context()
	waiting := func(p *store.JobInsertParams) { p.Status = store.JobWaiting }
	held := b.insert(t, "held", func(p *store.JobInsertParams) { p.Status = store.JobAwaitingApproval })
	require.Equal(t, store.JobAwaitingApproval, b.get(t, held.ID).Status)

	p1, p2, p3 := b.insert(t, "p1"), b.insert(t, "p2"), b.insert(t, "p3")
	child := b.insert(t, "child", waiting)
	tolerant := b.insert(t, "tolerant", waiting)
	strict := b.insert(t, "strict", waiting)
	require.Equal(t, store.JobWaiting, child.Status)
	before := b.get(t, p1.ID)
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error {
		if err := tx.JobDepInsert(ctx, []store.JobDep{
			{JobID: child.ID, ParentID: p1.ID, Label: "a"}, {JobID: child.ID, ParentID: p2.ID, Label: "b"},
			{JobID: tolerant.ID, ParentID: p2.ID}, {JobID: tolerant.ID, ParentID: p3.ID},
			{JobID: strict.ID, ParentID: p2.ID}, {JobID: strict.ID, ParentID: p3.ID},
		}); err != nil {
			return err
		}
		if err := tx.JobAddFlow(ctx, []string{child.ID, tolerant.ID, strict.ID}, store.FlowHasParents); err != nil {
			return err
		}
		if err := tx.JobAddFlow(ctx, []string{tolerant.ID}, store.FlowTolerant); err != nil {
			return err
		}
		return tx.JobAddFlow(ctx, []string{p1.ID, p2.ID, p3.ID}, store.FlowHasDependents)
	}))
	after := b.get(t, p1.ID)
	require.Equal(t, store.FlowHasDependents, after.Flow)
	after.Flow = before.Flow
	require.Equal(t, before, after, "JobAddFlow changes the flow bits only")
	require.Equal(t, store.FlowHasParents|store.FlowTolerant, b.get(t, tolerant.ID).Flow)
	require.True(t, b.get(t, tolerant.ID).Flow.Has(store.FlowTolerant))
	require.False(t, b.get(t, strict.ID).Flow.Has(store.FlowTolerant))

	// A duplicate row is a conflict.
	err := b.s.WithTx(ctx, func(tx store.Tx) error {
		if err := tx.JobDepInsert(ctx, []store.JobDep{{JobID: child.ID, ParentID: p1.ID}}); err != nil {
			return err
		}
		return tx.Flush(ctx)
	})
	require.ErrorIs(t, err, store.ErrConflict)

	ready := func() []string {
		got, err := b.s.JobListWaitingReady(ctx, store.WaitingReadyParams{Limit: 1000})
		require.NoError(t, err)
		return slices.DeleteFunc(got, func(id string) bool { return !strings.HasPrefix(id, b.prefix) })
	}
	require.Empty(t, ready(), "no parent ended")

	end := func(j store.Job, to store.JobStatus, result string) {
		t.Helper()
		u := store.JobUpdate{ID: j.ID, From: store.JobPending, To: to, Now: b.now}
		if result != "" {
			u.Result = json.RawMessage(result)
		}
		require.NoError(t, b.update(t, u))
	}
	end(p1, store.JobDone, `{"answer":42}`)
	require.Empty(t, ready(), "child waits for p2 too")
	end(p2, store.JobDone, `"`+strings.Repeat("x", 100)+`"`)
	require.Equal(t, []string{child.ID}, ready(), "child's parents both done; the others wait for p3")
	end(p3, store.JobDeadLetter, "")
	require.Equal(t, []string{child.ID, strict.ID, tolerant.ID}, ready())

	parents, err := b.s.JobParents(ctx, []string{child.ID, strict.ID}, 50)
	require.NoError(t, err)
	require.Len(t, parents, 4)
	require.Equal(t, store.JobParent{JobDep: store.JobDep{JobID: child.ID, ParentID: p1.ID, Label: "a"},
		Status: store.JobDone, Result: json.RawMessage(`{"answer":42}`), ResultBytes: 13}, parents[0])
	require.Equal(t, p2.ID, parents[1].ParentID)
	require.Nil(t, parents[1].Result, "over the size asked")
	require.Equal(t, 102, parents[1].ResultBytes)
	require.Equal(t, strict.ID, parents[2].JobID)
	require.Equal(t, store.JobDeadLetter, parents[3].Status)
	require.True(t, parents[3].Ended())
	require.False(t, parents[3].Succeeded())
	none, err := b.s.JobParents(ctx, []string{child.ID}, 0)
	require.NoError(t, err)
	require.Nil(t, none[0].Result, "no results asked")

	// A strict job is decided as soon as one parent failed, before the others end.
	early := b.insert(t, "early", waiting)
	p4 := b.insert(t, "p4")
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error {
		if err := tx.JobDepInsert(ctx, []store.JobDep{{JobID: early.ID, ParentID: p3.ID}, {JobID: early.ID, ParentID: p4.ID}}); err != nil {
			return err
		}
		return tx.JobAddFlow(ctx, []string{early.ID}, store.FlowHasParents)
	}))
	require.Contains(t, ready(), early.ID)

	// A parent whose row is gone counts as ended.
	gone := b.insert(t, "gone", waiting)
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error {
		if err := tx.JobDepInsert(ctx, []store.JobDep{{JobID: gone.ID, ParentID: b.id("never-was")}}); err != nil {
			return err
		}
		return tx.JobAddFlow(ctx, []string{gone.ID}, store.FlowHasParents)
	}))
	require.Contains(t, ready(), gone.ID)
	ps, err := b.s.JobParents(ctx, []string{gone.ID}, 10)
	require.NoError(t, err)
	require.Equal(t, store.JobStatus(""), ps[0].Status)
	require.True(t, ps[0].Ended())
}

// testWorkflows: a workflow and its steps round-trip with their jobs' status; its status moves
// by compare-and-set; listing filters and pages newest first; ended workflows past their
// retention go with their steps; the dependency rows of jobs that are gone are deleted.
func testWorkflows(t *testing.T, b *bundle) {
	ctx := t.Context()
	// 1993: no other subtest creates workflows this early.
	base := time.Date(1993, 1, 1, 0, 0, 0, 0, time.UTC)
	a := b.insert(t, "wa")
	wf := store.Workflow{ID: b.id("wf"), Agent: b.agent(), Status: store.WorkflowRunning, Spec: json.RawMessage(`{"steps":[]}`),
		CreatedBy: "agent:x", CreatedAt: base, UpdatedAt: base}
	steps := []store.WorkflowStep{
		{WorkflowID: wf.ID, Step: "a", JobID: a.ID, Position: 0},
		{WorkflowID: wf.ID, Step: "b", JobID: b.id("wb-missing"), Needs: []string{"a"}, Phase: 1, Position: 1},
	}
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error { return tx.WorkflowInsert(ctx, wf, steps) }))
	err := b.s.WithTx(ctx, func(tx store.Tx) error { return tx.WorkflowInsert(ctx, wf, nil) })
	require.ErrorIs(t, err, store.ErrConflict)

	got, err := b.s.WorkflowGet(ctx, wf.ID, false)
	require.NoError(t, err)
	require.Equal(t, wf, got)
	_, err = b.s.WorkflowGet(ctx, b.id("nope"), false)
	require.ErrorIs(t, err, store.ErrNotFound)
	st, err := b.s.WorkflowSteps(ctx, wf.ID)
	require.NoError(t, err)
	require.Equal(t, []store.WorkflowStepState{
		{WorkflowStep: store.WorkflowStep{WorkflowID: wf.ID, Step: "a", JobID: a.ID, Needs: []string{}}, JobStatus: store.JobPending},
		{WorkflowStep: steps[1], JobStatus: ""},
	}, st)

	settled := func() []string {
		got, err := b.s.WorkflowListSettled(ctx, 1000)
		require.NoError(t, err)
		return slices.DeleteFunc(got, func(id string) bool { return !strings.HasPrefix(id, b.prefix) })
	}
	require.Empty(t, settled(), "step a's job is pending")
	require.NoError(t, b.update(t, store.JobUpdate{ID: a.ID, From: store.JobPending, To: store.JobCancelled, Now: b.now}))
	require.Equal(t, []string{wf.ID}, settled(), "a ended, b's job is gone")

	later := base.Add(time.Hour)
	require.NoError(t, b.s.WorkflowSetStatus(ctx, wf.ID, store.WorkflowRunning, store.WorkflowDone, later))
	require.ErrorIs(t, b.s.WorkflowSetStatus(ctx, wf.ID, store.WorkflowRunning, store.WorkflowFailed, later), store.ErrConflict)
	require.ErrorIs(t, b.s.WorkflowSetStatus(ctx, b.id("nope"), store.WorkflowRunning, store.WorkflowFailed, later), store.ErrNotFound)
	got, err = b.s.WorkflowGet(ctx, wf.ID, false)
	require.NoError(t, err)
	require.Equal(t, store.WorkflowDone, got.Status)
	require.Equal(t, later, *got.FinishedAt)

	second := wf
	second.ID, second.CreatedAt, second.UpdatedAt = b.id("wf2"), base.Add(time.Minute), base.Add(time.Minute)
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error { return tx.WorkflowInsert(ctx, second, nil) }))
	list, err := b.s.WorkflowList(ctx, store.WorkflowListParams{Agent: b.agent(), Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{second.ID, wf.ID}, workflowIDs(list))
	list, err = b.s.WorkflowList(ctx, store.WorkflowListParams{Agent: b.agent(), Status: store.WorkflowRunning})
	require.NoError(t, err)
	require.Equal(t, []string{second.ID}, workflowIDs(list))
	list, err = b.s.WorkflowList(ctx, store.WorkflowListParams{Agent: b.agent(), BeforeAt: second.CreatedAt, BeforeID: second.ID})
	require.NoError(t, err)
	require.Equal(t, []string{wf.ID}, workflowIDs(list))

	n, err := b.s.WorkflowDeleteFinished(ctx, later.Add(time.Second), 100)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the done one; the running one stays")
	_, err = b.s.WorkflowGet(ctx, wf.ID, false)
	require.ErrorIs(t, err, store.ErrNotFound)
	st, err = b.s.WorkflowSteps(ctx, wf.ID)
	require.NoError(t, err)
	require.Empty(t, st)

	// Dependency rows of a job that is gone are orphans.
	require.NoError(t, b.s.WithTx(ctx, func(tx store.Tx) error {
		return tx.JobDepInsert(ctx, []store.JobDep{{JobID: b.id("orphan"), ParentID: a.ID}, {JobID: a.ID, ParentID: b.id("x")}})
	}))
	deleted := 0
	for {
		n, err := b.s.JobDepsDeleteOrphans(ctx, 1000)
		require.NoError(t, err)
		if n == 0 {
			break
		}
		deleted += n
	}
	require.GreaterOrEqual(t, deleted, 1)
	ps, err := b.s.JobParents(ctx, []string{b.id("orphan"), a.ID}, 0)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, a.ID, ps[0].JobID, "the row of a job that exists stays")
}

func workflowIDs(ws []store.Workflow) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}

package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// flowPlan is what one submit of a flow writes in one transaction: its jobs (a job with
// depends_on; a fan-out parent and its children; a workflow's steps), their dependency rows,
// the existing jobs they wait for, and the workflow. A plain job never gets here: it goes
// through the group commit (submit.go), which writes no row of job_deps and reads none.
type flowPlan struct {
	// jobs in insert order; for a job submit, jobs[0] is the job the submit answers with.
	jobs []*flowJob
	deps []store.JobDep
	// external are the existing jobs the plan's jobs wait for, in request order, each with
	// the request field that named it (for the 400 when it is not the agent's). They are
	// locked, and marked FlowHasDependents, in the plan's transaction.
	external []externalParent
	agent    string
	// workflow, when set, is inserted first with its steps; its id taken is an existing
	// workflow, not an error.
	workflow *store.Workflow
	steps    []store.WorkflowStep
	// events are audit rows beyond each job's submit (a workflow's creation).
	events []store.AuditEvent
	// holds are the plan's jobs that an approval policy holds (approvals.go).
	holds []approvalHold
}

// externalParent is an existing job a plan waits for, and the field that named it.
type externalParent struct{ id, field string }

// flowJob is one job of a plan: its validated request, its first status and flow bits, and
// what its submit's audit row says beyond the usual.
type flowJob struct {
	r       *submitReq
	status  store.JobStatus
	flow    store.JobFlow
	details map[string]any
}

// flowOutcome is what a plan's commit did.
type flowOutcome struct {
	// jobs are the inserted jobs, in plan order (none when the first job or the workflow
	// existed already).
	jobs []store.Job
	// existing is the job that held the first job's id (job submits only).
	existing *store.Job
	// existed says the workflow's id was taken.
	existed bool
}

// errPlanExists rolls back a plan whose first job or workflow exists already.
var errPlanExists = errors.New("exists already")

// commitFlow writes the plan in one transaction and, once committed, publishes its pending
// jobs and wakes the resolver for its waiting ones.
func (e *Engine) commitFlow(ctx context.Context, pl *flowPlan) (flowOutcome, error) {
	var out flowOutcome
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		out = flowOutcome{}
		var err error
		out.jobs, out.existing, err = e.writeFlow(ctx, tx, pl)
		if out.existing != nil || err == nil && out.jobs == nil {
			out.existed = out.existing == nil
			return errPlanExists
		}
		return err
	})
	switch {
	case errors.Is(err, errPlanExists):
		return out, nil
	case err != nil:
		return flowOutcome{}, err
	}
	e.afterFlow(ctx, pl, out.jobs)
	return out, nil
}

// writeFlow is commitFlow's transaction. It returns the jobs it inserted, or the existing job
// (or nil jobs for an existing workflow) when the plan's first id was taken.
func (e *Engine) writeFlow(ctx context.Context, tx store.Tx, pl *flowPlan) ([]store.Job, *store.Job, error) {
	now := e.nowUTC()
	rest := pl.jobs
	var jobs []store.Job
	if pl.workflow != nil {
		w := *pl.workflow
		w.CreatedAt, w.UpdatedAt = now, now
		if err := tx.WorkflowInsert(ctx, w, pl.steps); errors.Is(err, store.ErrConflict) {
			return nil, nil, nil
		} else if err != nil {
			return nil, nil, err
		}
	} else {
		first := pl.jobs[0]
		job, inserted, err := tx.JobInsert(ctx, first.insertParams(now))
		if err != nil {
			return nil, nil, err
		}
		if !inserted {
			return nil, &job, nil
		}
		jobs, rest = append(jobs, job), pl.jobs[1:]
	}
	if err := e.lockExternal(ctx, tx, pl); err != nil {
		return nil, nil, err
	}
	if len(rest) > 0 {
		ps := make([]store.JobInsertParams, len(rest))
		for i, fj := range rest {
			ps[i] = fj.insertParams(now)
		}
		more, err := tx.JobInsertMany(ctx, ps)
		if err != nil {
			return nil, nil, err
		}
		jobs = append(jobs, more...)
	}
	if len(pl.deps) > 0 {
		if err := tx.JobDepInsert(ctx, pl.deps); err != nil {
			return nil, nil, err
		}
	}
	if err := setFlows(ctx, tx, pl, jobs); err != nil {
		return nil, nil, err
	}
	events := slices.Clone(pl.events)
	for i, fj := range pl.jobs {
		events = append(events, fj.submittedEvent(jobs[i], now))
	}
	if len(pl.holds) > 0 {
		rows, evs := approvalRows(pl, now)
		if err := tx.ApprovalInsert(ctx, rows); err != nil {
			return nil, nil, err
		}
		events = append(events, evs...)
	}
	for i := range events {
		events[i].TS = now
	}
	if err := tx.AuditInsert(ctx, events); err != nil {
		return nil, nil, err
	}
	return jobs, nil, tx.Flush(ctx)
}

// lockExternal locks the existing jobs the plan waits for and checks that each is the
// plan's agent's: another agent's job is refused as if it did not exist (400 naming the
// field), so that ids cannot be probed.
func (e *Engine) lockExternal(ctx context.Context, tx store.Tx, pl *flowPlan) error {
	if len(pl.external) == 0 {
		return nil
	}
	ids := make([]string, len(pl.external))
	for i, x := range pl.external {
		ids[i] = x.id
	}
	found, err := tx.JobGetMany(ctx, ids, true)
	if err != nil {
		return err
	}
	mine := make(map[string]bool, len(found))
	for _, j := range found {
		mine[j.ID] = j.Agent == pl.agent
	}
	for _, x := range pl.external {
		if !mine[x.id] {
			return invalid(x.field, "no job %q of agent %q: a job can depend only on existing jobs of its own agent", x.id, pl.agent)
		}
	}
	return tx.JobAddFlow(ctx, ids, store.FlowHasDependents)
}

// setFlows sets the flow bits of the plan's new jobs, one UPDATE per distinct set of bits: a
// job's own, and FlowHasDependents on those another job of the plan waits for.
func setFlows(ctx context.Context, tx store.Tx, pl *flowPlan, jobs []store.Job) error {
	waitedFor := make(map[string]bool, len(pl.deps))
	for _, d := range pl.deps {
		waitedFor[d.ParentID] = true
	}
	byFlow := map[store.JobFlow][]string{}
	for i, fj := range pl.jobs {
		f := fj.flow
		if waitedFor[fj.r.p.JobID] {
			f |= store.FlowHasDependents
		}
		jobs[i].Flow = f
		if f != 0 {
			byFlow[f] = append(byFlow[f], fj.r.p.JobID)
		}
	}
	for _, f := range slices.Sorted(maps.Keys(byFlow)) {
		if err := tx.JobAddFlow(ctx, byFlow[f], f); err != nil {
			return err
		}
	}
	return nil
}

// afterFlow publishes the plan's pending jobs (the scheduler's are woken for instead) and
// wakes the resolver when any of its jobs waits: its parents may have ended already.
func (e *Engine) afterFlow(ctx context.Context, pl *flowPlan, jobs []store.Job) {
	var (
		pending []store.Job
		ctxs    []context.Context
		waiting bool
	)
	for i, j := range jobs {
		switch j.Status {
		case store.JobPending:
			pending, ctxs = append(pending, j), append(ctxs, pl.jobs[i].r.ctx)
		case store.JobWaiting:
			waiting = true
		}
	}
	if len(pending) > 0 {
		release := e.outbox.HoldAnswered()
		e.outbox.PublishSubmitted(ctx, pending, ctxs)
		release()
		for _, p := range pending {
			for i := range jobs {
				if jobs[i].ID == p.ID {
					jobs[i].Enqueued, jobs[i].StreamID = p.Enqueued, p.StreamID
				}
			}
		}
	}
	if waiting {
		e.WakeFlows()
	}
}

// insertParams is the job's row, with its first status.
func (fj *flowJob) insertParams(now time.Time) store.JobInsertParams {
	p := fj.r.insertParams(now)
	p.Status = fj.status
	return p
}

// submittedEvent is the job's job.submitted row, with the flow's details (its status, what it
// waits for, its fan-out or workflow).
func (fj *flowJob) submittedEvent(job store.Job, now time.Time) store.AuditEvent {
	ev := fj.r.submittedEvent(job, now)
	d := map[string]any{}
	_ = json.Unmarshal(ev.Details, &d)
	d["status"] = string(fj.status)
	maps.Copy(d, fj.details)
	ev.Details = mustJSON(d)
	return ev
}

// mustJSON marshals v, made of strings, numbers, times and maps and slices of them, which
// cannot fail.
func mustJSON(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("engine: marshal %T: %v", v, err))
	}
	return raw
}

// submitFlow submits one job of a flow (depends_on, fan_out, or an approval): its plan in one
// transaction. A job_id that exists answers as a plain submit's does (sameRequest), its
// depends_on compared too.
func (e *Engine) submitFlow(ctx context.Context, r *submitReq) SubmitOutcome {
	pl, err := e.jobPlan(ctx, r)
	if err != nil {
		return SubmitOutcome{Err: err}
	}
	out, err := e.commitFlow(ctx, pl)
	if err != nil {
		if _, ok := errors.AsType[*ValidationError](err); ok {
			return SubmitOutcome{Err: err}
		}
		return SubmitOutcome{Err: fmt.Errorf("submit job: %w", err)}
	}
	if out.existing == nil {
		return SubmitOutcome{Job: out.jobs[0], Created: true}
	}
	job := *out.existing
	if job.Agent != r.p.Agent {
		return SubmitOutcome{Err: fmt.Errorf("submit job %s: the id belongs to another agent: %w", r.p.JobID, store.ErrConflict)}
	}
	if err := e.sameRequest(r, job); err != nil {
		return SubmitOutcome{Err: err}
	}
	if err := e.sameParents(ctx, r, job); err != nil {
		return SubmitOutcome{Err: err}
	}
	return SubmitOutcome{Job: job}
}

// sameParents checks that a resubmit names the depends_on of the job that exists.
func (e *Engine) sameParents(ctx context.Context, r *submitReq, job store.Job) error {
	if r.flow == nil || r.flow.fanOut != nil {
		return nil // a fan-out's children hold its depends_on, and the request their parent's
	}
	var have []string
	if job.Flow.Has(store.FlowHasParents) && !job.Flow.Has(store.FlowFanOut) {
		rows, err := e.store.JobParents(ctx, []string{job.ID}, 0)
		if err != nil {
			return fmt.Errorf("submit job %s: read its parents: %w", job.ID, err)
		}
		for _, p := range rows {
			have = append(have, p.ParentID)
		}
	}
	if !slices.Equal(have, slices.Sorted(slices.Values(r.flow.dependsOn))) {
		return &MismatchError{JobID: job.ID, Field: "depends_on", Message: "the job exists with other depends_on" +
			"; a resubmit of a job_id must repeat its first request (a new job needs a new job_id)"}
	}
	return nil
}

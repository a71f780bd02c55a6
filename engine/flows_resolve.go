package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/engine/outbox"
	"github.com/gpuorch/orchestrator/store"
)

// The resolver's work (the leader's flows.Resolver runs it): every waiting job whose parents
// have ended moves on, in a transaction of its own behind the leader's fence.

// ResolveResult counts what one pass of the resolver did.
type ResolveResult struct {
	// Released counts waiting jobs moved to pending (their parents ended), Cancelled those
	// cancelled because a parent failed.
	Released, Cancelled int
	// FanOutsDone and FanOutsFailed count fan-out parents that ended; ChildrenCancelled the
	// children a fail_fast fan-out cancelled.
	FanOutsDone, FanOutsFailed, ChildrenCancelled int
	// WorkflowsEnded counts workflows that ended (done or failed).
	WorkflowsEnded int
}

func (r *ResolveResult) add(o ResolveResult) {
	r.Released += o.Released
	r.Cancelled += o.Cancelled
	r.FanOutsDone += o.FanOutsDone
	r.FanOutsFailed += o.FanOutsFailed
	r.ChildrenCancelled += o.ChildrenCancelled
	r.WorkflowsEnded += o.WorkflowsEnded
}

// ResolveFlows runs one pass of the resolver behind fence (nil: the engine's): it lists the
// waiting jobs that can be decided (store.JobListWaitingReady, batch at a time) and decides
// each in its own transaction, publishes those it released, then ends the workflows whose
// steps have all ended. A fenced transaction stops the pass: this instance no longer leads.
func (e *Engine) ResolveFlows(ctx context.Context, fence Fence, batch int) (ResolveResult, error) {
	var (
		res  ResolveResult
		errs []error
	)
	for {
		ids, err := e.store.JobListWaitingReady(ctx, store.WaitingReadyParams{Limit: batch})
		if err != nil {
			return res, fmt.Errorf("resolve flows: %w", err)
		}
		var released []store.Job
		failed := 0
		for _, id := range ids {
			one, rel, err := e.resolveOne(ctx, fence, id)
			switch {
			case errors.Is(err, store.ErrFenced):
				return res, fmt.Errorf("resolve job %s: %w", id, err)
			case err != nil:
				failed++
				errs = append(errs, fmt.Errorf("resolve job %s: %w", id, err))
				continue
			}
			res.add(one)
			released = append(released, rel...)
		}
		e.publishReleased(ctx, cmpFence(fence, e.fence), released)
		if len(ids) < batch || failed == len(ids) {
			break
		}
	}
	n, err := e.endWorkflows(ctx, fence, batch)
	res.WorkflowsEnded += n
	if err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// resolveOne decides one waiting job in its own fenced transaction: released to pending,
// cancelled (a parent failed), or, for a fan-out parent, ended with its children. A job that
// is no longer waiting, or cannot be decided yet, is left alone. It returns the jobs to
// publish.
func (e *Engine) resolveOne(ctx context.Context, fence Fence, id string) (ResolveResult, []store.Job, error) {
	if fence == nil {
		fence = e.fence
	}
	var (
		res      ResolveResult
		released []store.Job
	)
	now := e.nowUTC()
	err := e.fenced(ctx, fence, func(tx store.Tx) error {
		res, released = ResolveResult{}, nil
		jobs, err := tx.JobGetMany(ctx, []string{id}, true)
		if err != nil || len(jobs) == 0 || jobs[0].Status != store.JobWaiting {
			return err
		}
		job := jobs[0]
		resultMax := 0
		if job.Flow.Has(store.FlowFanOut) {
			resultMax = e.cfg.Flows.ParentResultsMaxBytes
		}
		parents, err := tx.JobParents(ctx, []string{id}, resultMax)
		if err != nil {
			return err
		}
		var events []store.AuditEvent
		if job.Flow.Has(store.FlowFanOut) {
			events, err = e.settleFanOut(ctx, tx, &job, parents, now, &res)
		} else {
			events, err = settleWaiting(ctx, tx, &job, parents, now, &res)
			if err == nil && job.Status == store.JobPending {
				released = append(released, job)
			}
		}
		if err != nil || len(events) == 0 {
			return err
		}
		return tx.AuditInsert(ctx, events)
	})
	if err != nil {
		return ResolveResult{}, nil, err
	}
	return res, released, nil
}

// settleWaiting decides a waiting job that is not a fan-out parent: a failed parent cancels
// it unless it is tolerant; once every parent has ended, it is released to pending.
func settleWaiting(ctx context.Context, tx store.Tx, job *store.Job, parents []store.JobParent, now time.Time,
	res *ResolveResult) ([]store.AuditEvent, error) {
	var failed *store.JobParent
	ended := map[string]string{}
	all := true
	for i, p := range parents {
		if !p.Ended() {
			all = false
			continue
		}
		ended[p.ParentID] = endedAs(p)
		if !p.Succeeded() && failed == nil {
			failed = &parents[i]
		}
	}
	switch {
	case failed != nil && !job.Flow.Has(store.FlowTolerant):
		res.Cancelled++
		msg := fmt.Sprintf("cancelled: parent %s ended %s", failed.ParentID, endedAs(*failed))
		return cancelLocked(ctx, tx, job, actorLeader, map[string]any{
			"reason": "dependency_failed", "parent_id": failed.ParentID, "parent_status": endedAs(*failed),
		}, msg, now)
	case all:
		res.Released++
		f := false
		ev, err := transition(ctx, tx, change{job: job, actor: actorLeader,
			update:  store.JobUpdate{To: store.JobPending, AvailableAt: &now, Enqueued: &f, Now: now},
			details: map[string]any{"parents": ended}})
		return []store.AuditEvent{ev}, err
	}
	return nil, nil
}

// cmpFence is fence, or def when fence is nil.
func cmpFence(fence, def Fence) Fence {
	if fence != nil {
		return fence
	}
	return def
}

// actorLeader is the audit actor of the leader's own decisions.
const actorLeader = "leader"

// endedAs is how a parent ended, "gone" when retention deleted its row.
func endedAs(p store.JobParent) string {
	if p.Status == "" {
		return "gone"
	}
	return string(p.Status)
}

// publishReleased publishes released jobs (the scheduler is woken for those it places
// instead), their marks behind fence (nil: none); what fails is the dispatcher's.
func (e *Engine) publishReleased(ctx context.Context, fence Fence, jobs []store.Job) {
	if len(jobs) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outbox.PublishTimeout)
	defer cancel()
	if _, err := e.outbox.Publish(pctx, jobs, outbox.Mark{Fence: fence}); err != nil {
		e.log.Warn("publish of released jobs failed; the dispatcher will publish them", "jobs", len(jobs),
			"first_job_id", jobs[0].ID, "error", err)
	}
}

// endWorkflows ends the running workflows whose steps' jobs have all ended: done when every
// one is done, failed otherwise, each in its own fenced transaction with a workflow.done or
// workflow.failed audit row. It returns how many it ended.
func (e *Engine) endWorkflows(ctx context.Context, fence Fence, batch int) (int, error) {
	ids, err := e.store.WorkflowListSettled(ctx, batch)
	if err != nil {
		return 0, fmt.Errorf("end workflows: %w", err)
	}
	if fence == nil {
		fence = e.fence
	}
	ended := 0
	var errs []error
	for _, id := range ids {
		now := e.nowUTC()
		var did bool
		err := e.fenced(ctx, fence, func(tx store.Tx) error {
			did = false
			w, err := tx.WorkflowGet(ctx, id, true)
			if err != nil || w.Status != store.WorkflowRunning {
				return err
			}
			steps, err := tx.WorkflowSteps(ctx, id)
			if err != nil {
				return err
			}
			to := store.WorkflowDone
			byStep := make(map[string]string, len(steps))
			for _, s := range steps {
				st := s.JobStatus
				if st != "" && !st.Terminal() {
					return nil // moved on since the listing: not settled after all
				}
				byStep[s.Step] = endedAs(store.JobParent{Status: st})
				if st != store.JobDone {
					to = store.WorkflowFailed
				}
			}
			if err := tx.WorkflowSetStatus(ctx, id, store.WorkflowRunning, to, now); err != nil {
				return err
			}
			did = true
			return tx.AuditInsert(ctx, []store.AuditEvent{workflowEvent(id, "workflow."+string(to), actorLeader, now,
				map[string]any{"steps": byStep})})
		})
		switch {
		case errors.Is(err, store.ErrFenced):
			return ended, fmt.Errorf("end workflow %s: %w", id, err)
		case err != nil:
			errs = append(errs, fmt.Errorf("end workflow %s: %w", id, err))
		case did:
			ended++
		}
	}
	return ended, errors.Join(errs...)
}

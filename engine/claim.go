package engine

import (
	"context"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
)

// Claim takes the jobs of the entries a worker read: a compare-and-set pending → claimed per
// job (attempts+1, worker_id, owner_pool) and their audit rows, all in one transaction. Entries
// whose job is missing, not pending or not yet due are refused (the worker acks and drops them).
func (e *Engine) Claim(ctx context.Context, p ClaimParams) (ClaimResult, error) {
	if p.WorkerID == "" {
		return ClaimResult{}, invalid("worker_id", "is required")
	}
	now := e.nowUTC()
	var res ClaimResult
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		res = ClaimResult{}
		ids := make([]string, 0, len(p.Items))
		for _, it := range p.Items {
			ids = append(ids, it.JobID)
		}
		byID, err := jobsByID(ctx, tx, ids, true)
		if err != nil {
			return err
		}
		events := make([]store.AuditEvent, 0, len(p.Items))
		for _, it := range p.Items {
			job, ok := byID[it.JobID]
			switch {
			case !ok:
				res.Refused = append(res.Refused, Refusal{JobID: it.JobID, Reason: RefusedNotFound})
				continue
			case job.Status != store.JobPending:
				res.Refused = append(res.Refused, Refusal{JobID: it.JobID, Reason: RefusedNotPending})
				continue
			case job.AvailableAt.After(now):
				res.Refused = append(res.Refused, Refusal{JobID: it.JobID, Reason: RefusedNotDue})
				continue
			}
			attempts := job.Attempts + 1
			ev, err := transition(ctx, tx, change{
				job: job,
				update: store.JobUpdate{
					To:        store.JobClaimed,
					Attempts:  &attempts,
					WorkerID:  &p.WorkerID,
					OwnerPool: &p.PoolID,
					Now:       now,
				},
				actor:   "worker:" + p.WorkerID,
				details: map[string]any{"attempt": attempts, "node_id": p.NodeID, "message_id": it.MessageID},
			})
			if err != nil {
				return err
			}
			events = append(events, ev)
			res.Claimed = append(res.Claimed, *job)
		}
		if err := tx.AuditInsert(ctx, events); err != nil {
			return err
		}
		res.Cancel, err = cancelledOf(ctx, tx, p.WorkerID, p.InFlight)
		return err
	})
	if err != nil {
		return ClaimResult{}, fmt.Errorf("claim jobs: %w", err)
	}
	return res, nil
}

// Start records that the handlers of claimed jobs began (claimed → running). Jobs that are not
// this worker's claimed jobs are skipped; the answer lists those of them that were cancelled.
func (e *Engine) Start(ctx context.Context, p StartParams) ([]string, error) {
	if p.WorkerID == "" {
		return nil, invalid("worker_id", "is required")
	}
	now := e.nowUTC()
	var cancel []string
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		byID, err := jobsByID(ctx, tx, p.JobIDs, true)
		if err != nil {
			return err
		}
		var events []store.AuditEvent
		for _, id := range p.JobIDs {
			job, ok := byID[id]
			if !ok || job.Status != store.JobClaimed || job.WorkerID != p.WorkerID {
				continue
			}
			ev, err := transition(ctx, tx, change{
				job:    job,
				update: store.JobUpdate{To: store.JobRunning, StartedAt: &now, Now: now},
				actor:  "worker:" + p.WorkerID,
			})
			if err != nil {
				return err
			}
			events = append(events, ev)
		}
		if err := tx.AuditInsert(ctx, events); err != nil {
			return err
		}
		cancel, err = cancelledOf(ctx, tx, p.WorkerID, p.JobIDs)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start jobs: %w", err)
	}
	return cancel, nil
}

// jobsByID loads the existing jobs among ids, deduplicated, locking them when forUpdate.
func jobsByID(ctx context.Context, tx store.Executor, ids []string, forUpdate bool) (map[string]*store.Job, error) {
	seen := make(map[string]bool, len(ids))
	uniq := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	jobs, err := tx.JobGetMany(ctx, uniq, forUpdate)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*store.Job, len(jobs))
	for i := range jobs {
		out[jobs[i].ID] = &jobs[i]
	}
	return out, nil
}

// cancelledOf returns the jobs among inFlight that the worker must stop: cancelled, or no longer
// its attempt (rescued and handed to another worker, or gone).
func cancelledOf(ctx context.Context, tx store.Executor, workerID string, inFlight []string) ([]string, error) {
	if len(inFlight) == 0 {
		return nil, nil
	}
	byID, err := jobsByID(ctx, tx, inFlight, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range inFlight {
		j, ok := byID[id]
		if !ok || j.Status == store.JobCancelled || j.WorkerID != workerID ||
			(j.Status != store.JobClaimed && j.Status != store.JobRunning) {
			out = append(out, id)
		}
	}
	return out, nil
}

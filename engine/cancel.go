package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
)

// Cancel moves a non-terminal job to cancelled. A running job's worker learns it on its next
// claim, start or complete call (the answer's cancel list) and cancels the handler; its late
// result is then stale. A terminal job gives ErrJobTerminal.
func (e *Engine) Cancel(ctx context.Context, id, actor string) (store.Job, error) {
	now := e.nowUTC()
	var job store.Job
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		jobs, err := tx.JobGetMany(ctx, []string{id}, true)
		if err != nil {
			return err
		}
		if len(jobs) == 0 {
			return store.ErrNotFound
		}
		job = jobs[0]
		if job.Status.Terminal() || !CanTransition(job.Status, store.JobCancelled) {
			return fmt.Errorf("%w: %s", ErrJobTerminal, job.Status)
		}
		empty, token, held := "", job.LeaseToken, job
		ev, err := transition(ctx, tx, change{
			job:     &job,
			update:  store.JobUpdate{To: store.JobCancelled, FinishedAt: &now, LeaseToken: &empty, Now: now},
			actor:   actor,
			details: map[string]any{"worker_id": job.WorkerID, "attempt": job.Attempts},
		})
		if err != nil {
			return err
		}
		events := []store.AuditEvent{ev}
		// The cancelled attempt's resources are free at once: the worker learns of the
		// cancellation on its next call (or renewal) and stops the handler.
		if lev, ok, err := releaseLease(ctx, tx, &held, token, now, actor, "job cancelled"); err != nil {
			return err
		} else if ok {
			events = append(events, lev)
		}
		return tx.AuditInsert(ctx, events)
	})
	if err != nil {
		if errors.Is(err, ErrJobTerminal) {
			// Said once: the caller names the operation (the client says "cancel job X").
			return store.Job{}, err
		}
		return store.Job{}, fmt.Errorf("cancel job %s: %w", id, err)
	}
	return job, nil
}

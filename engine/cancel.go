package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

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
		events, err := cancelLocked(ctx, tx, &job, actor, nil, "", now)
		if err != nil {
			return err
		}
		more, err := e.cancelFlowOf(ctx, tx, &job, actor, now)
		if err != nil {
			return err
		}
		return tx.AuditInsert(ctx, append(events, more...))
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

// cancelLocked cancels job, which the caller has locked and which may be cancelled, and
// releases the lease of its attempt: the audit rows to insert. details are added to the
// transition's; lastError, when not empty, becomes the job's last error (why it was cancelled).
func cancelLocked(ctx context.Context, tx store.Tx, job *store.Job, actor string, details map[string]any,
	lastError string, now time.Time) ([]store.AuditEvent, error) {
	empty, token, held := "", job.LeaseToken, *job
	d := map[string]any{"worker_id": job.WorkerID, "attempt": job.Attempts}
	maps.Copy(d, details)
	u := store.JobUpdate{To: store.JobCancelled, FinishedAt: &now, LeaseToken: &empty, Now: now}
	if lastError != "" {
		u.LastError = &lastError
	}
	ev, err := transition(ctx, tx, change{job: job, update: u, actor: actor, details: d})
	if err != nil {
		return nil, err
	}
	events := []store.AuditEvent{ev}
	// The cancelled attempt's resources are free at once: the worker learns of the
	// cancellation on its next call (or renewal) and stops the handler.
	if lev, ok, err := releaseLease(ctx, tx, &held, token, now, actor, "job cancelled"); err != nil {
		return nil, err
	} else if ok {
		events = append(events, lev)
	}
	return events, nil
}

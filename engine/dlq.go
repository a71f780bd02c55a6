package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine/outbox"
	"github.com/gpuorch/orchestrator/store"
)

// ErrNotDeadLetter is returned by Replay and Purge for a job that is not in the dead-letter
// queue: another status, or a dead letter already purged. The API answers 409.
var ErrNotDeadLetter = errors.New("job is not in the dead-letter queue")

// ErrNotReplayable is returned by Replay for a dead letter that cannot run again: a fan-out
// parent, whose children ran. The API answers 409.
var ErrNotReplayable = errors.New("dead letter cannot be replayed")

// EventDLQPurged is the audit event of a purge (a replay is the transition
// job.dead_letter->pending).
const EventDLQPurged = "dlq.purged"

// dlqDeleteTimeout bounds the XDEL after a replay or purge committed.
const dlqDeleteTimeout = 2 * time.Second

// ListDeadLetters returns a page of the dead-letter queue from the job rows (the truth),
// newest first. A job's StreamID is its DLQ entry when Enqueued is set; a dead letter with
// Enqueued unset is not on the stream yet (the DLQ relay publishes it within a second).
func (e *Engine) ListDeadLetters(ctx context.Context, p store.DeadLetterListParams) ([]store.Job, error) {
	jobs, err := e.store.JobListDeadLetters(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return jobs, nil
}

// Replay sends a dead letter back to pending with a fresh attempt budget: max_attempts becomes
// attempts + the type's max_attempts (attempts never go down, the outbox mark relies on it),
// available at once, last_error kept. The transition and its audit row (with actor) commit
// together; then the DLQ entry is deleted and the job published, both best effort (the
// dispatcher publishes what could not be, and an orphan DLQ entry is trimmed with age).
func (e *Engine) Replay(ctx context.Context, jobID, actor string) (store.Job, error) {
	now := e.nowUTC()
	var (
		job   store.Job
		dlqID string
	)
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		var err error
		if job, err = lockDeadLetter(ctx, tx, jobID); err != nil {
			return err
		}
		if job.Flow.Has(store.FlowFanOut) {
			return fmt.Errorf("%w: job %s is a fan-out parent, which never runs: submit the fan-out again", ErrNotReplayable, job.ID)
		}
		dlqID = dlqEntryOf(job)
		budget := config.MaxAttemptsDefault
		if jt := e.cfg.JobType(job.Type); jt != nil {
			budget = jt.MaxAttempts
		}
		maxAttempts := job.Attempts + budget
		f, empty, zero := false, "", time.Time{}
		ev, err := transition(ctx, tx, change{
			job: &job,
			update: store.JobUpdate{
				To: store.JobPending, MaxAttempts: &maxAttempts, AvailableAt: &now, Enqueued: &f,
				WorkerID: &empty, LeaseToken: &empty, StartedAt: &zero, FinishedAt: &zero, Now: now,
			},
			actor:   actor,
			details: map[string]any{"attempts": job.Attempts, "max_attempts": maxAttempts, "dlq_stream_id": dlqID},
		})
		if err != nil {
			return err
		}
		return tx.AuditInsert(ctx, []store.AuditEvent{ev})
	})
	if err != nil {
		return store.Job{}, fmt.Errorf("replay dead letter %s: %w", jobID, err)
	}
	// Committed: nothing below may fail the replay, nor be cut short by a client hanging up.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outbox.PublishTimeout)
	defer cancel()
	e.deleteDLQEntry(pctx, job.ID, dlqID)
	if _, err := e.outbox.Publish(pctx, []store.Job{job}, outbox.Mark{}); err != nil {
		e.log.Warn("publish after replay failed; the dispatcher will publish", "job_id", job.ID, "error", err)
		return job, nil
	}
	if fresh, err := e.store.JobGet(pctx, job.ID); err == nil {
		job = fresh // with the new entry's stream_id
	}
	return job, nil
}

// Purge removes a dead letter from the queue: the job stays dead_letter (its row and history
// are kept until retention deletes them), is marked purged so that it is neither listed nor
// published to the DLQ again, and the purge is audited with actor. The DLQ entry is deleted
// after the commit, best effort.
func (e *Engine) Purge(ctx context.Context, jobID, actor string) (store.Job, error) {
	now := e.nowUTC()
	var (
		job   store.Job
		dlqID string
	)
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		var err error
		if job, err = lockDeadLetter(ctx, tx, jobID); err != nil {
			return err
		}
		dlqID = dlqEntryOf(job)
		if err := tx.JobMarkDeadLetterPurged(ctx, job.ID, now); err != nil {
			return err
		}
		details, _ := json.Marshal(map[string]any{"dlq_stream_id": dlqID, "attempts": job.Attempts})
		return tx.AuditInsert(ctx, []store.AuditEvent{{
			TS: now, EventType: EventDLQPurged, JobID: job.ID, Actor: actor, Details: details,
		}})
	})
	if err != nil {
		return store.Job{}, fmt.Errorf("purge dead letter %s: %w", jobID, err)
	}
	job.Enqueued, job.StreamID, job.UpdatedAt = true, store.StreamIDPurged, now
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dlqDeleteTimeout)
	defer cancel()
	e.deleteDLQEntry(dctx, job.ID, dlqID)
	return job, nil
}

// lockDeadLetter reads the job FOR UPDATE and checks that it is in the dead-letter queue.
func lockDeadLetter(ctx context.Context, tx store.Tx, jobID string) (store.Job, error) {
	jobs, err := tx.JobGetMany(ctx, []string{jobID}, true)
	if err != nil {
		return store.Job{}, err
	}
	if len(jobs) == 0 {
		return store.Job{}, store.ErrNotFound
	}
	j := jobs[0]
	switch {
	case j.DeadLetterPurged():
		return store.Job{}, fmt.Errorf("%w: it was purged", ErrNotDeadLetter)
	case j.Status != store.JobDeadLetter:
		return store.Job{}, fmt.Errorf("%w: it is %s", ErrNotDeadLetter, j.Status)
	}
	return j, nil
}

// dlqEntryOf returns the DLQ entry id of a dead letter, "" when it is not on the stream.
func dlqEntryOf(j store.Job) string {
	if j.Status != store.JobDeadLetter || !j.Enqueued || j.DeadLetterPurged() {
		return ""
	}
	return j.StreamID
}

// deleteDLQEntry deletes a job's DLQ entry, logging a failure (the entry is trimmed with age).
func (e *Engine) deleteDLQEntry(ctx context.Context, jobID, id string) {
	if id == "" {
		return
	}
	if _, err := e.streams.DeleteDeadLetters(ctx, id); err != nil {
		e.log.Warn("cannot delete the DLQ entry", "job_id", jobID, "stream_id", id, "error", err)
	}
}

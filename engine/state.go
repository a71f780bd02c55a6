// Package engine is the job lifecycle: submit (with outbox), claim, start, complete, cancel,
// retry scheduling and the dispatcher. Every job state change goes through transition, which
// checks the allowed-transitions table and writes the audit row in the same transaction.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
)

// ErrIllegalTransition is returned for a move the state machine does not allow.
var ErrIllegalTransition = errors.New("illegal job transition")

// transitions is the job state machine of DESIGN.md: from → allowed targets.
var transitions = map[store.JobStatus][]store.JobStatus{
	// claim; cancel; dead-letter at admission of a replayed job is not possible: nothing else.
	store.JobPending: {store.JobClaimed, store.JobCancelled},
	// start; failed attempt (lease lost, handler error before start); cancel; give back unstarted
	// (a draining worker or a GPU that has no room after all).
	store.JobClaimed: {store.JobRunning, store.JobFailed, store.JobCancelled, store.JobPending},
	store.JobRunning: {store.JobDone, store.JobFailed, store.JobCancelled},
	// a failed attempt is retried (back to pending, with backoff) or dead-lettered.
	store.JobFailed:     {store.JobPending, store.JobDeadLetter},
	store.JobDeadLetter: {store.JobPending}, // replay by an operator
	store.JobDone:       nil,
	store.JobCancelled:  nil,
}

// CanTransition reports whether the state machine allows from → to.
func CanTransition(from, to store.JobStatus) bool {
	for _, t := range transitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// Audit event types that are not transitions.
const (
	EventSubmitted = "job.submitted"
)

// TransitionEvent is the audit event type of a transition, e.g. "job.pending->claimed".
func TransitionEvent(from, to store.JobStatus) string {
	return "job." + string(from) + "->" + string(to)
}

// change is one validated transition of a job, to be written with its audit row.
type change struct {
	job     *store.Job // current row; updated in place on success
	update  store.JobUpdate
	actor   string
	details map[string]any
}

// transition validates u (From must be the job's current status), applies it with a
// compare-and-set, and returns the audit event to insert in the same transaction. The job is
// updated in memory to match the row.
func transition(ctx context.Context, tx store.Executor, c change) (store.AuditEvent, error) {
	from, to := c.job.Status, c.update.To
	if !CanTransition(from, to) {
		return store.AuditEvent{}, fmt.Errorf("%w: job %s %s -> %s", ErrIllegalTransition, c.job.ID, from, to)
	}
	c.update.ID = c.job.ID
	c.update.From = from
	if err := tx.JobUpdate(ctx, c.update); err != nil {
		return store.AuditEvent{}, fmt.Errorf("job %s %s -> %s: %w", c.job.ID, from, to, err)
	}
	applyUpdate(c.job, c.update)
	recordTransition(tx, from, c.job, c.update.Now)
	ev := store.AuditEvent{
		TS:         c.update.Now,
		EventType:  TransitionEvent(from, to),
		JobID:      c.job.ID,
		LeaseToken: c.job.LeaseToken,
		Actor:      c.actor,
	}
	if len(c.details) > 0 {
		ev.Details, _ = json.Marshal(c.details)
	}
	return ev, nil
}

// applyUpdate mirrors a successful JobUpdate on the in-memory row.
func applyUpdate(j *store.Job, u store.JobUpdate) {
	j.Status = u.To
	j.UpdatedAt = u.Now
	if u.Attempts != nil {
		j.Attempts = *u.Attempts
	}
	if u.MaxAttempts != nil {
		j.MaxAttempts = *u.MaxAttempts
	}
	if u.AvailableAt != nil {
		j.AvailableAt = *u.AvailableAt
	}
	if u.Enqueued != nil {
		j.Enqueued = *u.Enqueued
	}
	if u.OwnerPool != nil {
		j.OwnerPool = *u.OwnerPool
	}
	if u.WorkerID != nil {
		j.WorkerID = *u.WorkerID
	}
	if u.LeaseToken != nil {
		j.LeaseToken = *u.LeaseToken
	}
	if u.Result != nil {
		j.Result = u.Result
	}
	if u.LastError != nil {
		j.LastError = *u.LastError
	}
	if u.StartedAt != nil {
		t := *u.StartedAt
		j.StartedAt = &t
	}
	if u.FinishedAt != nil {
		t := *u.FinishedAt
		j.FinishedAt = &t
	}
}

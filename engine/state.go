// Package engine is the job lifecycle: submit (with outbox), claim, start, complete, cancel,
// retry scheduling and the dispatcher. Every job state change goes through transition, which
// checks the allowed-transitions table and writes the audit row in the same transaction.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/gpuorch/orchestrator/store"
)

// ErrIllegalTransition is returned for a move the state machine does not allow.
var ErrIllegalTransition = errors.New("illegal job transition")

// transitions is the job state machine (docs/architecture.md, "Job states"): from → allowed
// targets.
var transitions = map[store.JobStatus][]store.JobStatus{
	// approved (to pending, or to waiting when it has parents still to end); rejected or
	// expired (cancelled).
	store.JobAwaitingApproval: {store.JobPending, store.JobWaiting, store.JobCancelled},
	// its parents ended (pending; cancelled when one failed); a fan-out parent ends with its
	// children: done, or failed and then dead_letter in the same transaction.
	store.JobWaiting: {store.JobPending, store.JobCancelled, store.JobDone, store.JobFailed},
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
	evs, err := transitionAll(ctx, tx, []plan{{job: c.job, actor: c.actor, steps: []step{{c.update, c.details}}}})
	if err != nil {
		return store.AuditEvent{}, err
	}
	return evs[0], nil
}

// step is one transition of a plan: its update (To and the fields it sets) and audit details.
type step struct {
	update  store.JobUpdate
	details map[string]any
}

// plan is the transitions one transaction makes to one job, in order (e.g. running → failed →
// pending).
type plan struct {
	job   *store.Job // current row; updated in place on success
	actor string
	steps []step
}

// transitionAll validates each plan's chain of transitions against the state machine and writes
// all of them with one batch of compare-and-sets: a plan's steps are merged into one write from
// the job's current status to its last target (store.JobUpdateMany). A job whose row moved on
// fails the batch. It returns the audit events to insert in the same transaction, one per
// step, and updates the jobs in memory.
func transitionAll(ctx context.Context, tx store.Executor, plans []plan) ([]store.AuditEvent, error) {
	us := make([]store.JobUpdate, 0, len(plans))
	for _, p := range plans {
		if len(p.steps) == 0 {
			continue
		}
		merged := store.JobUpdate{ID: p.job.ID, From: p.job.Status}
		from := p.job.Status
		for _, s := range p.steps {
			if !CanTransition(from, s.update.To) {
				return nil, fmt.Errorf("%w: job %s %s -> %s", ErrIllegalTransition, p.job.ID, from, s.update.To)
			}
			mergeUpdate(&merged, s.update)
			from = s.update.To
		}
		us = append(us, merged)
	}
	if len(us) == 0 {
		return nil, nil
	}
	if err := tx.JobUpdateMany(ctx, us); err != nil {
		if len(us) == 1 {
			return nil, fmt.Errorf("job %s %s -> %s: %w", us[0].ID, us[0].From, us[0].To, err)
		}
		return nil, fmt.Errorf("move %d jobs: %w", len(us), err)
	}
	var events []store.AuditEvent
	for _, p := range plans {
		for _, s := range p.steps {
			from, held := p.job.Status, p.job.LeaseToken
			applyUpdate(p.job, s.update)
			recordTransition(tx, from, p.job, s.update.Now)
			// The row names the job's lease, or the one this transition took from it.
			token := p.job.LeaseToken
			if token == "" {
				token = held
			}
			ev := store.AuditEvent{
				TS:         s.update.Now,
				EventType:  TransitionEvent(from, s.update.To),
				JobID:      p.job.ID,
				LeaseToken: token,
				Actor:      p.actor,
			}
			details := s.details
			if p.job.CallbackURL != "" && s.update.To.Terminal() {
				// The webhooks' tail reads a job only for the events that need it: this row
				// says that its job has a callback (docs/architecture.md, "Webhooks").
				details = withDetail(maps.Clone(details), store.AuditDetailCallback, true)
			}
			if len(details) > 0 {
				ev.Details, _ = json.Marshal(details)
			}
			events = append(events, ev)
		}
	}
	return events, nil
}

// mergeUpdate lays a later step's update over dst: its target, time and every field it sets.
func mergeUpdate(dst *store.JobUpdate, u store.JobUpdate) {
	dst.To, dst.Now = u.To, u.Now
	if u.ExpectAttempts != nil && dst.ExpectAttempts == nil {
		dst.ExpectAttempts = u.ExpectAttempts
	}
	if u.ExpectWorker != nil && dst.ExpectWorker == nil {
		dst.ExpectWorker = u.ExpectWorker
	}
	pick(&dst.Attempts, u.Attempts)
	pick(&dst.MaxAttempts, u.MaxAttempts)
	pick(&dst.AvailableAt, u.AvailableAt)
	pick(&dst.Enqueued, u.Enqueued)
	pick(&dst.OwnerPool, u.OwnerPool)
	pick(&dst.WorkerID, u.WorkerID)
	if u.LeaseToken != nil { // the placed node goes with the token (store.JobUpdate)
		dst.LeaseToken, dst.PlacedNode = u.LeaseToken, u.PlacedNode
	}
	pick(&dst.StreamID, u.StreamID)
	pick(&dst.WaitingReason, u.WaitingReason)
	pick(&dst.LastError, u.LastError)
	pick(&dst.StartedAt, u.StartedAt)
	pick(&dst.FinishedAt, u.FinishedAt)
	pick(&dst.LeaseExpiresAt, u.LeaseExpiresAt)
	if u.Result != nil {
		dst.Result = u.Result
	}
}

func pick[T any](dst **T, v *T) {
	if v != nil {
		*dst = v
	}
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
		j.LeaseToken, j.PlacedNode = *u.LeaseToken, ""
		if u.PlacedNode != nil {
			j.PlacedNode = *u.PlacedNode
		}
	}
	if u.StreamID != nil {
		j.StreamID = *u.StreamID
	}
	if u.WaitingReason != nil {
		j.WaitingReason = *u.WaitingReason
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
	if u.LeaseExpiresAt != nil {
		t := *u.LeaseExpiresAt
		j.LeaseExpiresAt = &t
		if t.IsZero() {
			j.LeaseExpiresAt = nil
		}
	}
}

package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// ReasonWorkerLost is the last_error of an attempt whose worker went quiet past its lease.
const ReasonWorkerLost = "worker lost"

// rescueActor is the audit actor of rescues: leader-only maintenance.
const rescueActor = "leader"

// Rescue takes a job away from a worker that is gone: when the job is claimed or running, it
// expires the job's active lease (if any), records the failed attempt (reason as last_error,
// with its audit rows) and retries the job with backoff, or dead-letters it when its attempts
// are exhausted, all in one transaction behind the engine's Fence. It returns the outcome
// (OutcomeRetry or OutcomeDeadLetter). A job in any other state, or missing, is left alone
// and the outcome is OutcomeStale.
//
// The reclaimer calls it for an entry whose job's lease expired; the lease purger does the same
// for every expired lease (rescueLease). A zombie worker's late result is then refused
// (OutcomeLeaseExpired), so the rescued job is never overwritten.
func (e *Engine) Rescue(ctx context.Context, jobID string, reason string) (outcome string, err error) {
	now := e.nowUTC()
	err = e.fenced(ctx, e.fence, func(tx store.Tx) error {
		var events []store.AuditEvent
		outcome, events, err = e.rescueTx(ctx, tx, jobID, "", reason, now)
		if err != nil {
			return err
		}
		return tx.AuditInsert(ctx, events)
	})
	if err != nil {
		return "", fmt.Errorf("rescue job %s: %w", jobID, err)
	}
	return outcome, nil
}

// rescueTx is the core of Rescue and of the purger, inside the caller's transaction. token
// names the lease to expire: "" means the job's current lease (Rescue); the purger passes the
// expired lease it found, which it expires whatever became of the job, and the job fails its
// attempt only while that lease is still its current one. Locks: the job, then the lease.
func (e *Engine) rescueTx(ctx context.Context, tx store.Tx, jobID, token, reason string, now time.Time) (string, []store.AuditEvent, error) {
	var events []store.AuditEvent
	jobs, err := tx.JobGetMany(ctx, []string{jobID}, true)
	if err != nil {
		return "", nil, err
	}
	var job *store.Job
	if len(jobs) == 1 {
		job = &jobs[0]
	}
	live := job != nil && (job.Status == store.JobClaimed || job.Status == store.JobRunning)
	purging := token != ""
	if token == "" {
		if !live {
			return OutcomeStale, nil, nil
		}
		token = job.LeaseToken
	}
	if token != "" {
		// The purger's lease must still be past its expiry: a heartbeat may have come in since
		// it was listed, and a renewed lease is not taken away.
		ev, expired, err := expireLease(ctx, tx, job, token, reason, now, purging)
		if err != nil {
			return "", nil, err
		}
		if !expired && purging {
			return OutcomeStale, nil, nil
		}
		if expired {
			events = append(events, ev)
		}
	}
	if job != nil && job.Status == store.JobPending && purging && job.LeaseToken == token {
		// A placement that no worker of its node claimed within the lease's TTL: the job
		// goes back to the scheduler, with no attempt spent.
		ev, err := unplace(ctx, tx, job, now)
		if err != nil {
			return "", nil, err
		}
		e.log.Info("placement expired unclaimed; the job is scheduled again", "job_id", job.ID, "node_id", job.PlacedNode)
		return OutcomeStale, append(events, ev), nil
	}
	if !live || (job.LeaseToken != "" && job.LeaseToken != token) {
		return OutcomeStale, events, nil
	}
	pl := plan{job: job, actor: rescueActor}
	add := func(u store.JobUpdate, details map[string]any) {
		u.Now = now
		pl.steps = append(pl.steps, step{update: u, details: details})
	}
	msg := reason
	if msg == "" {
		msg = ReasonWorkerLost
	}
	add(store.JobUpdate{To: store.JobFailed, LastError: &msg},
		map[string]any{"attempt": job.Attempts, "error": truncate(msg, 512), "worker_id": job.WorkerID})
	outcome := e.afterFailure(job, false, now, add)
	evs, err := transitionAll(ctx, tx, []plan{pl})
	if err != nil {
		return "", nil, err
	}
	events = append(events, evs...)
	e.log.Info("job rescued", "job_id", job.ID, "attempt", job.Attempts, "lease_token", token,
		"outcome", outcome, "reason", msg)
	return outcome, events, nil
}

// expireLease moves an active lease to expired (locking it first) and returns the audit event;
// expired is false when the lease does not exist or has already ended, or, with pastExpiry,
// when a heartbeat moved its expiry beyond now.
func expireLease(ctx context.Context, tx store.Tx, job *store.Job, token, reason string, now time.Time, pastExpiry bool) (store.AuditEvent, bool, error) {
	l, err := lockLease(ctx, tx, job, token)
	if errors.Is(err, store.ErrNotFound) {
		return store.AuditEvent{}, false, nil
	}
	if err != nil {
		return store.AuditEvent{}, false, err
	}
	if l.Status != store.LeaseActive || (pastExpiry && l.ExpiresAt.After(now)) {
		return store.AuditEvent{}, false, nil
	}
	details := map[string]any{"expires_at": l.ExpiresAt, "last_heartbeat": l.LastHeartbeat}
	if reason != "" {
		details["reason"] = reason
	}
	ev, err := leases.Transition(ctx, tx, &l, store.LeaseExpired, now, rescueActor, details)
	return ev, err == nil, err
}

// releaseLease moves an active lease to released (locking it first) and returns the audit
// event; released is false when there is no such lease or it has already ended.
func releaseLease(ctx context.Context, tx store.Tx, job *store.Job, token string, now time.Time, actor, reason string) (store.AuditEvent, bool, error) {
	if token == "" {
		return store.AuditEvent{}, false, nil
	}
	l, err := lockLease(ctx, tx, job, token)
	if errors.Is(err, store.ErrNotFound) {
		return store.AuditEvent{}, false, nil
	}
	if err != nil || l.Status != store.LeaseActive {
		return store.AuditEvent{}, false, err
	}
	ev, err := leases.Transition(ctx, tx, &l, store.LeaseReleased, now, actor, map[string]any{"reason": reason})
	return ev, err == nil, err
}

// lockLease loads and locks the lease of token, which job (locked, as it was before any
// transition of this transaction) held: a lease of orchestrator_leases, or the one held in
// job's row, which the job's lock covers (store.ErrNotFound when the job no longer holds it).
// Ending a lease of a job row writes nothing (leases.TransitionMany): the job's transition
// clears its token.
func lockLease(ctx context.Context, tx store.Tx, job *store.Job, token string) (store.Lease, error) {
	if !leases.InJobRow(token) {
		return tx.LeaseGet(ctx, token, true)
	}
	if job != nil && job.LeaseToken == token {
		if l, ok := leases.JobLease(job, "", 0); ok {
			return l, nil
		}
	}
	return store.Lease{}, store.ErrNotFound
}

// unplace takes a placed pending job's placement away (its lease has ended): the job is the
// scheduler's again, not enqueued, with the reason as its waiting reason.
func unplace(ctx context.Context, tx store.Tx, job *store.Job, now time.Time) (store.AuditEvent, error) {
	empty, f := "", false
	node, pool := store.SplitTarget(job.PlacedNode)
	where := fmt.Sprintf("node %q", node)
	if pool != "" {
		where += fmt.Sprintf(" for pool %q", pool)
	}
	why := fmt.Sprintf("%s: placed on %s, no worker there claimed it before its lease expired; "+
		"another node is preferred", ReasonPlacementExpired, where)
	err := tx.JobUpdate(ctx, store.JobUpdate{ID: job.ID, From: store.JobPending, To: store.JobPending,
		LeaseToken: &empty, Enqueued: &f, WaitingReason: &why, Now: now})
	if err != nil {
		return store.AuditEvent{}, err
	}
	details, _ := json.Marshal(map[string]any{"node_id": node, "pool_id": pool, "reason": why})
	return store.AuditEvent{TS: now, EventType: EventUnplaced, JobID: job.ID, LeaseToken: job.LeaseToken,
		Actor: rescueActor, Details: details}, nil
}

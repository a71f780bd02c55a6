package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// Complete records the outcomes of attempts in one transaction. A result counts only while the
// job is still this worker's attempt (claimed or running, same worker, same attempt number, same
// lease); otherwise it is stale and ignored, so a worker that lost its job cannot overwrite it.
// A result carrying a lease that expired is refused as lease_expired: its worker went quiet past
// the TTL, and the job is (or is about to be) rescued and run by another. A failed attempt goes
// back to pending with backoff while attempts remain and is dead-lettered otherwise (or at once
// when the handler marked the error non-retryable). The attempt's lease is released in the same
// transaction as the job's new state.
func (e *Engine) Complete(ctx context.Context, p CompleteParams) (CompleteResult, error) {
	if p.WorkerID == "" {
		return CompleteResult{}, invalid("worker_id", "is required")
	}
	now := e.nowUTC()
	var (
		res   CompleteResult
		freed freedNodes
	)
	err := e.store.WithTx(ctx, func(tx store.Tx) error {
		ids := make([]string, 0, len(p.Results))
		for _, r := range p.Results {
			ids = append(ids, r.JobID)
		}
		byID, held, err := lockJobsAndLeases(ctx, tx, ids, nil, p.Results)
		if err != nil {
			return err
		}
		tx.DeferChecks() // every row completeIn writes is locked
		outcomes, events, err := e.completeIn(ctx, tx, p.WorkerID, p.Results, byID, held, now)
		if err != nil {
			return err
		}
		freed = releasedNodes(held, byID)
		res = CompleteResult{Outcomes: outcomes}
		if err := tx.AuditInsert(ctx, events); err != nil {
			return err
		}
		res.Cancel, err = cancelledOf(ctx, tx, p.WorkerID, p.InFlight)
		return err
	})
	if err != nil {
		return CompleteResult{}, fmt.Errorf("complete jobs: %w", err)
	}
	e.released(freed)
	return res, nil
}

// freedNodes is what a call's released leases freed: the nodes of its GPU leases, each once,
// and whether a job the scheduler places without GPUs gave back a worker slot.
type freedNodes struct {
	gpu   []string
	slots bool
}

// releasedNodes is what the leases among held (by token; their jobs in byID) free when
// released.
func releasedNodes(held map[string]*store.Lease, byID map[string]*store.Job) freedNodes {
	var out freedNodes
	for _, l := range held {
		switch j := byID[l.JobID]; {
		case l.Mode == store.LeaseGPU && !slices.Contains(out.gpu, l.NodeID):
			out.gpu = append(out.gpu, l.NodeID)
		case l.Mode != store.LeaseGPU && j != nil && j.Scheduled():
			out.slots = true
		}
	}
	return out
}

// released tells Options.GPUFreed of the nodes whose GPU leases a committed call released, and
// wakes the scheduler when a scheduled job gave back a worker slot (a GPU release wakes it
// through GPUFreed's wiring).
func (e *Engine) released(f freedNodes) {
	if e.onGPUFreed != nil {
		for _, n := range f.gpu {
			e.onGPUFreed(n)
		}
	}
	if f.slots && e.wakeScheduler != nil {
		e.wakeScheduler()
	}
}

// completeIn records results inside tx (see Complete) and returns their outcomes, in order, and
// the audit events to insert. byID holds the results' jobs and held their leases, both locked
// (lockJobsAndLeases). The jobs in byID move to their new status.
func (e *Engine) completeIn(ctx context.Context, tx store.Tx, workerID string, results []Result,
	byID map[string]*store.Job, held map[string]*store.Lease, now time.Time) ([]Outcome, []store.AuditEvent, error) {
	outcomes := make([]Outcome, 0, len(results))
	var (
		plans    []plan
		releases []leases.Change
		// The jobs and leases this call already settles: a result listed twice is stale the
		// second time.
		settled  = map[string]bool{}
		released = map[string]bool{}
		actor    = "worker:" + workerID
		status   = make([]*store.Job, len(results)) // whose status each outcome reports
	)
	// The leases whose release their job's transition row records: no row of their own.
	folded := map[string]bool{}
	release := func(l *store.Lease, details map[string]any) bool {
		if l != nil && l.Status == store.LeaseActive && !released[l.Token] {
			released[l.Token] = true
			releases = append(releases, leases.Change{Lease: l, To: store.LeaseReleased, Details: details})
			return true
		}
		return false
	}
	for i, r := range results {
		job, ok := byID[r.JobID]
		status[i] = job
		lease := held[r.LeaseToken]
		if lease != nil && lease.JobID != r.JobID {
			lease = nil // a token of another job proves nothing about this one
		}
		if lease != nil && leaseExpired(lease, now) {
			outcomes = append(outcomes, Outcome{JobID: r.JobID, Outcome: OutcomeLeaseExpired})
			continue
		}
		if !ok || settled[job.ID] || !e.ownsAttempt(job, workerID, r) {
			// A live lease that is not the job's current one (the job was cancelled, or
			// settled otherwise) is of no use to anyone any more.
			if lease != nil && (!ok || job.LeaseToken != lease.Token) {
				release(lease, map[string]any{"reason": "stale result"})
			}
			outcomes = append(outcomes, Outcome{JobID: r.JobID, Outcome: OutcomeStale})
			continue
		}
		settled[job.ID] = true
		pl, outcome := e.finish(job, actor, r, now)
		// The job's own lease ends with the attempt: the job's last transition row (the one
		// that clears its lease_token) records the release (see transitionAll).
		if release(lease, nil) {
			folded[lease.Token] = true
			last := &pl.steps[len(pl.steps)-1]
			last.details = withDetail(last.details, "lease_released", true)
		}
		plans = append(plans, pl)
		outcomes = append(outcomes, Outcome{JobID: r.JobID, Outcome: outcome})
	}
	events, err := leases.TransitionMany(ctx, tx, releases, now, actor)
	if err != nil {
		return nil, nil, err
	}
	events = slices.DeleteFunc(events, func(ev store.AuditEvent) bool { return folded[ev.LeaseToken] })
	jobEvents, err := transitionAll(ctx, tx, plans)
	if err != nil {
		return nil, nil, err
	}
	for i := range outcomes {
		if status[i] != nil {
			outcomes[i].Status = status[i].Status
		}
	}
	return outcomes, append(events, jobEvents...), nil
}

// leaseExpired reports whether a lease has expired: the purger marked it, or its expiry passed
// without a heartbeat and the purger has not come round yet. Either way its holder lost it.
func leaseExpired(l *store.Lease, now time.Time) bool {
	return l.Status == store.LeaseExpired || (l.Status == store.LeaseActive && !l.ExpiresAt.After(now))
}

// lockJobsAndLeases loads and locks the existing jobs among ids and the leases of results, jobs
// first: the lock order of every transaction that writes both. Only the jobs among withPayload
// come with their payload (store.LockParams).
func lockJobsAndLeases(ctx context.Context, tx store.Tx, ids, withPayload []string, results []Result) (map[string]*store.Job, map[string]*store.Lease, error) {
	tokens := make([]string, 0, len(results))
	for _, r := range results {
		if !leases.InJobRow(r.LeaseToken) {
			tokens = append(tokens, r.LeaseToken)
		}
	}
	jobs, ls, err := tx.LockJobsAndLeases(ctx, store.LockParams{Jobs: ids, Payloads: withPayload, Leases: tokens})
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[string]*store.Job, len(jobs))
	for i := range jobs {
		byID[jobs[i].ID] = &jobs[i]
	}
	held := make(map[string]*store.Lease, len(ls))
	for i := range ls {
		held[ls[i].Token] = &ls[i]
	}
	// The leases held in the results' job rows, locked with their rows; a lease the job no
	// longer holds has ended, and how tells a zombie's result (lease_expired) from a stale one.
	for _, r := range results {
		j := byID[r.JobID]
		if jobID, ok := leases.JobOfToken(r.LeaseToken); !ok || j == nil || jobID != j.ID {
			continue
		}
		if l, ok := leases.JobLease(j, "", 0); ok && j.LeaseToken == r.LeaseToken {
			held[l.Token] = &l
			continue
		}
		status, err := leases.EndedJobLease(ctx, tx, j.ID, r.LeaseToken)
		if err != nil {
			return nil, nil, err
		}
		held[r.LeaseToken] = &store.Lease{Token: r.LeaseToken, JobID: j.ID, Mode: store.LeaseCPU, Status: status}
	}
	return byID, held, nil
}

// ownsAttempt reports whether r is the result of the job's current attempt by this worker.
func (e *Engine) ownsAttempt(job *store.Job, workerID string, r Result) bool {
	if job.Status != store.JobClaimed && job.Status != store.JobRunning {
		return false
	}
	if job.WorkerID != workerID || job.Attempts != r.Attempt {
		return false
	}
	return r.LeaseToken == job.LeaseToken
}

// finish plans one owned result: (claimed →) running → done, or → failed → pending|dead_letter.
func (e *Engine) finish(job *store.Job, actor string, r Result, now time.Time) (plan, string) {
	pl := plan{job: job, actor: actor}
	add := func(u store.JobUpdate, details map[string]any) {
		u.Now = now
		pl.steps = append(pl.steps, step{update: u, details: details})
	}
	if r.Done {
		if job.Status == store.JobClaimed {
			// The result carries the start (the job ended before its start report went out,
			// or that report is still on its way): date it by the worker's elapsed time, no
			// earlier than the claim.
			started := now
			if r.Elapsed > 0 {
				started = now.Add(-r.Elapsed).Truncate(time.Microsecond)
				if started.Before(job.UpdatedAt) {
					started = job.UpdatedAt
				}
			}
			add(store.JobUpdate{To: store.JobRunning, StartedAt: &started}, nil)
		}
		output := r.Output
		if len(output) == 0 || (!r.OutputChecked && !json.Valid(output)) {
			output = json.RawMessage("null")
		}
		empty := ""
		add(store.JobUpdate{To: store.JobDone, Result: output, FinishedAt: &now, LeaseToken: &empty},
			map[string]any{"attempt": job.Attempts})
		return pl, OutcomeDone
	}
	msg := r.Error
	if msg == "" {
		msg = "failed without an error message"
	}
	add(store.JobUpdate{To: store.JobFailed, LastError: &msg},
		map[string]any{"attempt": job.Attempts, "error": truncate(msg, 512), "non_retryable": r.NonRetryable})
	return pl, e.afterFailure(job, r.NonRetryable, now, add)
}

// afterFailure moves a failed job on: back to pending with backoff while attempts remain,
// otherwise (or when non-retryable) to dead_letter. Shared by completions and rescues.
func (e *Engine) afterFailure(job *store.Job, nonRetryable bool, now time.Time, step func(store.JobUpdate, map[string]any)) string {
	empty := ""
	if nonRetryable || job.Attempts >= job.MaxAttempts {
		reason := "attempts exhausted"
		if nonRetryable {
			reason = "non-retryable error"
		}
		// enqueued=0: the dead letter is not yet on the DLQ stream (the DLQ relay publishes it,
		// the same outbox as the dispatcher's).
		f := false
		step(store.JobUpdate{To: store.JobDeadLetter, FinishedAt: &now, LeaseToken: &empty, Enqueued: &f},
			map[string]any{"reason": reason, "attempts": job.Attempts})
		return OutcomeDeadLetter
	}
	delay := time.Duration(0)
	if jt := e.cfg.JobType(job.Type); jt != nil {
		delay = RetryDelay(jt.Backoff, job.Attempts, nil)
	}
	at := now.Add(delay).Truncate(time.Microsecond)
	f := false
	step(store.JobUpdate{To: store.JobPending, AvailableAt: &at, Enqueued: &f, WorkerID: &empty, LeaseToken: &empty},
		map[string]any{"retry_in_ms": delay.Milliseconds(), "next_attempt": job.Attempts + 1})
	return OutcomeRetry
}

// withDetail sets details[key] = value, making the map when there is none.
func withDetail(details map[string]any, key string, value any) map[string]any {
	if details == nil {
		details = map[string]any{}
	}
	details[key] = value
	return details
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

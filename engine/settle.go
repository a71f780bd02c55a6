package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/engine/outbox"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// SettleOutcome says what becomes of a stream entry that stayed unacknowledged past the claim
// idle time, once it is compared with its job row. The values are the reclaimer's metric
// labels.
type SettleOutcome string

// Settle outcomes.
const (
	// SettleTerminal: the job is done, dead-lettered or cancelled; the entry is acked.
	SettleTerminal SettleOutcome = "terminal"
	// SettleMissing: no such job (deleted by retention) or an entry without a job id; acked.
	SettleMissing SettleOutcome = "missing"
	// SettleStale: the entry was published for an earlier attempt of a job that a later
	// attempt now holds; the later attempt has its own entry, so this one is acked.
	SettleStale SettleOutcome = "stale"
	// SettleRepublished: the job is pending and due, but the consumer that read the entry never
	// claimed it (it died, or left it for lack of a GPU): a new entry is published so that any
	// worker can take it, and the old one is acked.
	SettleRepublished SettleOutcome = "republished"
	// SettleRequeued: the job is pending and its outbox flag is (now) clear, so the
	// dispatcher publishes it when it is due; the entry is acked.
	SettleRequeued SettleOutcome = "requeued"
	// SettleLive: the job is claimed or running under a lease that is alive (or whose state
	// is unknown: the lease purger has the last word); the entry is left pending.
	SettleLive SettleOutcome = "live"
	// SettleRescue: the job is claimed or running but its lease expired: the worker is gone.
	// The reclaimer rescues the job (a failed attempt: retry or dead letter), then acks.
	SettleRescue SettleOutcome = "rescue"
)

// SettleOutcomes lists every outcome (for pre-creating metric labels).
var SettleOutcomes = []SettleOutcome{
	SettleTerminal, SettleMissing, SettleStale, SettleRepublished, SettleRequeued, SettleLive, SettleRescue,
}

// Acks reports whether the entry is acknowledged right away. SettleLive entries stay pending;
// SettleRescue entries are acked by the reclaimer once the rescue is recorded.
func (o SettleOutcome) Acks() bool { return o != SettleLive && o != SettleRescue }

// LeaseState is what is known about the lease of a claimed or running job.
type LeaseState int

// Lease states.
const (
	// LeaseUnknown: no lease information; the entry is left to the lease purger.
	LeaseUnknown LeaseState = iota
	// LeaseLive: the lease is active and not past its expiry.
	LeaseLive
	// LeaseExpired: the lease is expired, released or gone while the job still holds it.
	LeaseExpired
)

// Decide is the settle decision table of the reclaimer: what to do with entry d whose job row
// is job (nil when the job does not exist), given the state of the job's lease, at now.
func Decide(job *store.Job, d streams.Delivery, lease LeaseState, now time.Time) SettleOutcome {
	if job == nil || d.JobID == "" {
		return SettleMissing
	}
	switch job.Status {
	case store.JobDone, store.JobDeadLetter, store.JobCancelled:
		return SettleTerminal
	case store.JobPending:
		if job.Enqueued && !job.AvailableAt.After(now) {
			return SettleRepublished
		}
		// Not published for the current attempt (a retry waiting for its backoff): the
		// dispatcher owns it. Enqueued but not due cannot be published now (a worker would
		// refuse and drop the entry): the flag is cleared and the dispatcher owns it too.
		return SettleRequeued
	case store.JobWaiting, store.JobAwaitingApproval:
		// Never published while so (an entry of one is stray): its release publishes it.
		return SettleRequeued
	case store.JobClaimed, store.JobRunning:
		// An entry carries the attempts at publication; the claim it leads to makes it
		// attempts+1. An older entry belongs to an attempt that is over.
		if d.Attempt >= 0 && d.Attempt+1 < job.Attempts {
			return SettleStale
		}
		if lease == LeaseExpired {
			return SettleRescue
		}
		return SettleLive
	}
	// failed exists only inside a transaction; anything else is left alone.
	return SettleLive
}

// SettleParams are the entries of one XAUTOCLAIM batch.
type SettleParams struct {
	Entries []streams.Delivery
	// Fence guards the writes (clearing outbox flags).
	Fence Fence
}

// Settlement is the outcome of one entry.
type Settlement struct {
	Entry   streams.Delivery
	Outcome SettleOutcome
	// Status is the job's status when it was read ("" when missing).
	Status store.JobStatus
}

// Settle decides every entry against its job row and does the engine's part: it publishes the
// pending jobs to republish and clears the outbox flag of those the dispatcher must publish
// later. Acking and rescuing are the caller's (the reclaimer's). On error nothing should be
// acked: the entries stay pending and come back on a later pass.
func (e *Engine) Settle(ctx context.Context, p SettleParams) ([]Settlement, error) {
	ids := make([]string, 0, len(p.Entries))
	for _, d := range p.Entries {
		if d.JobID != "" {
			ids = append(ids, d.JobID)
		}
	}
	byID, err := jobsByID(ctx, e.store, ids, false)
	if err != nil {
		return nil, fmt.Errorf("settle entries: load jobs: %w", err)
	}
	leases, err := e.leaseStates(ctx, byID)
	if err != nil {
		return nil, fmt.Errorf("settle entries: %w", err)
	}
	now := e.nowUTC()
	out := make([]Settlement, 0, len(p.Entries))
	var (
		republish []store.Job
		unmark    []string
		seen      = map[string]bool{}
	)
	for _, d := range p.Entries {
		job := byID[d.JobID]
		s := Settlement{Entry: d, Outcome: Decide(job, d, leases[d.JobID], now)}
		if job != nil {
			s.Status = job.Status
		}
		out = append(out, s)
		if seen[d.JobID] {
			continue // one republication per job, however many of its entries were idle
		}
		seen[d.JobID] = true
		switch {
		case s.Outcome == SettleRepublished:
			republish = append(republish, *job)
		case s.Outcome == SettleRequeued && job.Enqueued:
			unmark = append(unmark, job.ID)
		}
	}
	if err := e.clearEnqueued(ctx, p.Fence, store.JobPending, unmark); err != nil {
		return nil, fmt.Errorf("settle entries: requeue %d jobs: %w", len(unmark), err)
	}
	if len(republish) > 0 {
		if _, err := e.outbox.Publish(ctx, republish, outbox.Mark{}); err != nil {
			return nil, fmt.Errorf("settle entries: republish %d jobs: %w", len(republish), err)
		}
	}
	return out, nil
}

// leaseStates tells, for the claimed and running jobs among byID, whether their leases are
// alive: active and not past expires_at. A lease that is past its expiry (even if the lease
// purger has not expired it yet), released, expired or gone means the worker is gone. A job
// without a lease token is LeaseUnknown and left to the lease purger.
func (e *Engine) leaseStates(ctx context.Context, byID map[string]*store.Job) (map[string]LeaseState, error) {
	out := make(map[string]LeaseState, len(byID))
	var tokens []string
	byToken := map[string]store.Lease{}
	for _, j := range byID {
		if (j.Status == store.JobClaimed || j.Status == store.JobRunning) && j.LeaseToken != "" {
			if l, ok := leases.JobLease(j, "", 0); ok {
				byToken[l.Token] = l // held in the job's row
			} else {
				tokens = append(tokens, j.LeaseToken)
			}
		}
	}
	if len(tokens) > 0 {
		ls, err := e.store.LeaseGetMany(ctx, tokens, false)
		if err != nil {
			return nil, fmt.Errorf("load leases: %w", err)
		}
		for _, l := range ls {
			byToken[l.Token] = l
		}
	}
	now := e.nowUTC()
	for id, j := range byID {
		if (j.Status != store.JobClaimed && j.Status != store.JobRunning) || j.LeaseToken == "" {
			continue
		}
		l, ok := byToken[j.LeaseToken]
		if ok && l.Status == store.LeaseActive && l.ExpiresAt.After(now) {
			out[id] = LeaseLive
		} else {
			out[id] = LeaseExpired
		}
	}
	return out, nil
}

package engine

import (
	"context"
	"time"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// The engine is the leases.LeasePurger's Expirer: the purging loop lives in package leases,
// the job state machine it drives stays here.
var _ leases.Expirer = (*Engine)(nil)

// ExpiredLeases returns the engine clock now and up to limit active leases past their expiry
// at that instant (leases.Expirer): of orchestrator_leases, then of job rows.
func (e *Engine) ExpiredLeases(ctx context.Context, limit int) (time.Time, []store.Lease, error) {
	now := e.nowUTC()
	expired, err := e.store.LeaseListExpired(ctx, now, limit)
	if err != nil || len(expired) >= limit {
		return now, expired, err
	}
	jobs, err := e.store.JobLeasesExpired(ctx, now, limit-len(expired))
	if err != nil {
		return now, nil, err
	}
	for i := range jobs {
		if l, ok := leases.JobLease(&jobs[i], "", 0); ok {
			expired = append(expired, l)
		}
	}
	return now, expired, nil
}

// ExpireLease expires l and rescues its job, in one transaction guarded by fence (nil: the
// engine's Options.Fence): the job of an expired lease has lost its worker, so its attempt
// fails with ReasonWorkerLost and the job is retried with backoff or dead-lettered (Rescue's
// core). A lease that a heartbeat renewed meanwhile is left alone (leases.Expirer).
func (e *Engine) ExpireLease(ctx context.Context, fence leases.Fence, l store.Lease, now time.Time) (leases.PurgeResult, error) {
	if fence == nil {
		fence = e.fence
	}
	var res leases.PurgeResult
	err := e.fenced(ctx, fence, func(tx store.Tx) error {
		res = leases.PurgeResult{}
		var (
			events  []store.AuditEvent
			outcome string
		)
		if l.JobID != "" {
			var err error
			if outcome, events, err = e.rescueTx(ctx, tx, l.JobID, l.Token, ReasonWorkerLost, now); err != nil {
				return err
			}
		} else {
			ev, ok, err := expireLease(ctx, tx, nil, l.Token, "the holder missed its heartbeats", now, true)
			if err != nil {
				return err
			}
			if ok {
				events = append(events, ev)
			}
		}
		for _, ev := range events {
			if ev.LeaseToken == l.Token && ev.EventType == leases.EventExpired {
				res.Expired = 1
			}
		}
		switch outcome {
		case OutcomeRetry:
			res.Retried = 1
		case OutcomeDeadLetter:
			res.DeadLettered = 1
		}
		return tx.AuditInsert(ctx, events)
	})
	if err != nil {
		return leases.PurgeResult{}, err
	}
	return res, nil
}

package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// LeasePurger defaults.
const (
	// LeasePurgerIntervalDefault is the time between two passes.
	LeasePurgerIntervalDefault = config.LeasePurgeIntervalDefault
	// LeasePurgerBatchDefault is the most expired leases one query returns; a pass repeats
	// while batches come back full.
	LeasePurgerBatchDefault = 500
)

// LeasePurgerConfig configures a LeasePurger.
type LeasePurgerConfig struct {
	// Interval between passes (± 10% jitter); default LeasePurgerIntervalDefault.
	Interval time.Duration
	// Batch is the most leases one query returns (default LeasePurgerBatchDefault).
	Batch int
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
	// Fence guards every write of a pass (nil: the engine's Options.Fence).
	Fence Fence
}

// PurgeResult counts what one pass did.
type PurgeResult struct {
	// Expired counts leases moved to expired.
	Expired int
	// Retried and DeadLettered count the jobs of expired leases that were rescued.
	Retried      int
	DeadLettered int
}

// LeasePurger expires the active leases whose holder went quiet past their expiry. The job of
// an expired lease has lost its worker: its attempt fails with "worker lost" and the job is
// retried with backoff, or dead-lettered when its attempts are exhausted (Rescue's core), in
// the same transaction as the expiry. A lease that a heartbeat renewed meanwhile is left alone.
type LeasePurger struct {
	startstop.Base
	engine *Engine
	cfg    LeasePurgerConfig
	log    *slog.Logger
}

// NewLeasePurger returns a LeasePurger of e's leases.
func NewLeasePurger(e *Engine, cfg LeasePurgerConfig) *LeasePurger {
	cfg.Interval = cmp.Or(cfg.Interval, LeasePurgerIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, LeasePurgerBatchDefault)
	if cfg.Fence == nil {
		cfg.Fence = e.fence
	}
	return &LeasePurger{engine: e, cfg: cfg, log: e.log.With("component", "lease_purger")}
}

// Start runs the purger until ctx ends or Stop is called. It returns at once.
func (p *LeasePurger) Start(ctx context.Context) error {
	p.Go(ctx, func(ctx context.Context) {
		startstop.Loop(ctx, startstop.LoopParams{
			Interval: p.cfg.Interval, Jitter: 0.1, Stagger: p.cfg.Stagger, Logger: p.log,
		}, func(ctx context.Context) error {
			_, err := p.runOnce(ctx)
			return err
		})
	})
	return nil
}

// runOnce expires every lease past its expiry now, each in its own fenced transaction so that
// one failure does not hold the others back. A fenced pass stops at once: this instance is no
// longer the leader.
func (p *LeasePurger) runOnce(ctx context.Context) (PurgeResult, error) {
	var (
		res  PurgeResult
		errs []error
	)
	for {
		now := p.engine.nowUTC()
		expired, err := p.engine.store.LeaseListExpired(ctx, now, p.cfg.Batch)
		if err != nil {
			return res, fmt.Errorf("list expired leases: %w", err)
		}
		failed := 0
		for _, l := range expired {
			outcome, expiredOne, err := p.purge(ctx, l, now)
			switch {
			case errors.Is(err, store.ErrFenced):
				return res, fmt.Errorf("purge lease %s: %w", l.Token, err)
			case err != nil:
				failed++
				errs = append(errs, fmt.Errorf("purge lease %s: %w", l.Token, err))
				continue
			}
			if expiredOne {
				res.Expired++
			}
			switch outcome {
			case OutcomeRetry:
				res.Retried++
			case OutcomeDeadLetter:
				res.DeadLettered++
			}
		}
		if res.Expired > 0 {
			p.log.Debug("purged expired leases", "expired", res.Expired, "retried", res.Retried,
				"dead_lettered", res.DeadLettered)
		}
		// Stop on a short batch, and when nothing in a full one could be purged (it would come
		// back unchanged).
		if len(expired) < p.cfg.Batch || failed == len(expired) {
			return res, errors.Join(errs...)
		}
	}
}

// purge expires one lease and rescues its job, in one fenced transaction.
func (p *LeasePurger) purge(ctx context.Context, l store.Lease, now time.Time) (outcome string, expired bool, err error) {
	err = p.engine.fenced(ctx, p.cfg.Fence, func(tx store.Tx) error {
		var events []store.AuditEvent
		if l.JobID != "" {
			var err error
			if outcome, events, err = p.engine.rescueTx(ctx, tx, l.JobID, l.Token, ReasonWorkerLost, now); err != nil {
				return err
			}
		} else {
			ev, ok, err := expireLease(ctx, tx, l.Token, "the holder missed its heartbeats", now, true)
			if err != nil {
				return err
			}
			if ok {
				events = append(events, ev)
			}
		}
		expired = false
		for _, ev := range events {
			expired = expired || (ev.LeaseToken == l.Token && ev.EventType == leases.EventExpired)
		}
		return tx.AuditInsert(ctx, events)
	})
	return outcome, expired, err
}

package leases

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
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

// Fence guards the writes of a leader: it runs first in every transaction of a pass and
// refuses it (wrapping store.ErrFenced) once this instance no longer leads.
type Fence = store.Fence

// Expirer is what the LeasePurger needs from the job engine (engine.Engine), which owns the
// job state machine: listing the leases past their expiry, and expiring one together with
// the rescue of its job.
type Expirer interface {
	// ExpiredLeases returns the engine's clock now and up to limit active leases past their
	// expiry at that instant.
	ExpiredLeases(ctx context.Context, limit int) (now time.Time, expired []store.Lease, err error)
	// ExpireLease expires l, when it is still active and past its expiry at now, and rescues
	// its job (retry or dead letter) in the same transaction, guarded by fence (nil: the
	// engine's own). It counts what it did in a PurgeResult of at most one lease.
	ExpireLease(ctx context.Context, fence Fence, l store.Lease, now time.Time) (PurgeResult, error)
}

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
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// PurgeResult counts what one pass did.
type PurgeResult struct {
	// Expired counts leases moved to expired.
	Expired int
	// Retried and DeadLettered count the jobs of expired leases that were rescued.
	Retried      int
	DeadLettered int
}

// add adds the counts of o to r.
func (r *PurgeResult) add(o PurgeResult) {
	r.Expired += o.Expired
	r.Retried += o.Retried
	r.DeadLettered += o.DeadLettered
}

// LeasePurger expires the active leases whose holder went quiet past their expiry. The job of
// an expired lease has lost its worker: its attempt fails with "worker lost" and the job is
// retried with backoff, or dead-lettered when its attempts are exhausted, in the same
// transaction as the expiry (the Expirer does both). A lease that a heartbeat renewed
// meanwhile is left alone.
type LeasePurger struct {
	startstop.Base
	exp Expirer
	cfg LeasePurgerConfig
	log *slog.Logger
}

// NewLeasePurger returns a LeasePurger that expires leases through exp.
func NewLeasePurger(exp Expirer, cfg LeasePurgerConfig) *LeasePurger {
	cfg.Interval = cmp.Or(cfg.Interval, LeasePurgerIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, LeasePurgerBatchDefault)
	return &LeasePurger{exp: exp, cfg: cfg, log: logging.Component(cfg.Logger, "lease_purger")}
}

// Start runs the purger until ctx ends or Stop is called. It returns at once.
func (p *LeasePurger) Start(ctx context.Context) error {
	return p.StartLoop(ctx, startstop.Every(p.cfg.Interval, p.cfg.Stagger, nil, p.log), startstop.Pass(p.RunOnce))
}

// RunOnce runs one pass (the loop's body; tools and tests call it directly): it expires every
// lease past its expiry now, each in its own fenced transaction so that one failure does not
// hold the others back. A fenced pass stops at once: this instance is no longer the leader.
func (p *LeasePurger) RunOnce(ctx context.Context) (PurgeResult, error) {
	var (
		res  PurgeResult
		errs []error
	)
	for {
		now, expired, err := p.exp.ExpiredLeases(ctx, p.cfg.Batch)
		if err != nil {
			return res, fmt.Errorf("list expired leases: %w", err)
		}
		failed := 0
		for _, l := range expired {
			one, err := p.exp.ExpireLease(ctx, p.cfg.Fence, l, now)
			switch {
			case errors.Is(err, store.ErrFenced):
				return res, fmt.Errorf("purge lease %s: %w", l.Token, err)
			case err != nil:
				failed++
				errs = append(errs, fmt.Errorf("purge lease %s: %w", l.Token, err))
				continue
			}
			res.add(one)
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

package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/store"
)

// RetentionConfig configures a RetentionCleaner. How long rows are kept comes from the
// engine's configuration: job_types.<type>.retention, dead_letter_retention, audit_retention
// (audit rows and ended leases).
type RetentionConfig struct {
	// Interval between passes (± 10% jitter); default config.RetentionIntervalDefault.
	Interval time.Duration
	// Batch is the most rows one DELETE removes (default config.RetentionBatchDefault): each
	// batch is its own short transaction, so the hot path never waits long behind it.
	Batch int
	// Fence guards the deletions of a leader (nil: none).
	Fence Fence
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
}

// RetentionResult counts what one pass deleted.
type RetentionResult struct {
	Jobs   int
	Audit  int
	Leases int
}

// RetentionCleaner is the leader loop that keeps the tables bounded under a constant load: it
// deletes terminal jobs older than their retention (done and cancelled jobs, and purged dead
// letters, after their type's retention; other dead letters after dead_letter_retention), and
// audit rows and ended (released or expired) leases older than audit_retention: every attempt
// leaves a lease row behind, the record of what it held, which is kept as long as the audit
// trail that names it. Jobs of types no longer configured are deleted after
// the longest retention of any type. Stream trimming is the reclaimer package's Trimmer.
type RetentionCleaner struct {
	startstop.Base
	engine *Engine
	cfg    RetentionConfig
	log    *slog.Logger
}

// NewRetentionCleaner returns a RetentionCleaner over e's store and configuration.
func NewRetentionCleaner(e *Engine, cfg RetentionConfig) *RetentionCleaner {
	cfg.Interval = cmp.Or(cfg.Interval, config.RetentionIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, config.RetentionBatchDefault)
	return &RetentionCleaner{engine: e, cfg: cfg, log: e.log.With("component", "retention")}
}

// Start runs the cleaner until ctx ends or Stop is called. It returns at once.
func (r *RetentionCleaner) Start(ctx context.Context) error {
	r.Go(ctx, func(ctx context.Context) {
		startstop.Loop(ctx, startstop.LoopParams{
			Interval: r.cfg.Interval, Jitter: 0.1, Stagger: r.cfg.Stagger, Logger: r.log,
		}, func(ctx context.Context) error {
			res, err := r.runOnce(ctx)
			if res.Jobs > 0 || res.Audit > 0 || res.Leases > 0 {
				r.log.Info("deleted expired rows", "jobs", res.Jobs, "audit", res.Audit, "leases", res.Leases)
			}
			return err
		})
	})
	return nil
}

// runOnce deletes everything that is past its retention now, batch after batch.
func (r *RetentionCleaner) runOnce(ctx context.Context) (RetentionResult, error) {
	e := r.engine
	now := e.nowUTC()
	dlRetention := cmp.Or(e.cfg.DeadLetterRetention, config.DeadLetterRetentionDefault)
	var (
		res     RetentionResult
		names   = e.cfg.TypeNames()
		longest = config.RetentionDefault
	)
	for _, name := range names {
		keep := cmp.Or(e.cfg.JobTypes[name].Retention, config.RetentionDefault)
		longest = max(longest, keep)
		for _, p := range []store.JobDeleteParams{
			{Status: store.JobDone, Type: name, Before: now.Add(-keep)},
			{Status: store.JobCancelled, Type: name, Before: now.Add(-keep)},
			{Status: store.JobDeadLetter, Type: name, PurgedOnly: true, Before: now.Add(-keep)},
			{Status: store.JobDeadLetter, Type: name, Before: now.Add(-dlRetention)},
		} {
			n, err := r.deleteJobs(ctx, p)
			res.Jobs += n
			if err != nil {
				return res, err
			}
		}
	}
	// Types that are no longer configured: the longest retention is safe for any of them.
	for _, p := range []store.JobDeleteParams{
		{Status: store.JobDone, ExceptTypes: names, Before: now.Add(-longest)},
		{Status: store.JobCancelled, ExceptTypes: names, Before: now.Add(-longest)},
		{Status: store.JobDeadLetter, ExceptTypes: names, Before: now.Add(-max(longest, dlRetention))},
	} {
		n, err := r.deleteJobs(ctx, p)
		res.Jobs += n
		if err != nil {
			return res, err
		}
	}
	auditBefore := now.Add(-cmp.Or(e.cfg.AuditRetention, config.AuditRetentionDefault))
	n, err := r.deleteBatches(ctx, "audit rows", func(tx store.Tx) (int, error) {
		return tx.AuditDeleteBefore(ctx, auditBefore, r.cfg.Batch)
	})
	res.Audit += n
	if err != nil {
		return res, err
	}
	n, err = r.deleteBatches(ctx, "ended leases", func(tx store.Tx) (int, error) {
		return tx.LeaseDeleteEnded(ctx, auditBefore, r.cfg.Batch)
	})
	res.Leases += n
	return res, err
}

// deleteJobs deletes the jobs of p in batches.
func (r *RetentionCleaner) deleteJobs(ctx context.Context, p store.JobDeleteParams) (int, error) {
	p.Limit = r.cfg.Batch
	return r.deleteBatches(ctx, string(p.Status)+" jobs", func(tx store.Tx) (int, error) {
		return tx.JobDeleteTerminal(ctx, p)
	})
}

// deleteBatches runs del, one fenced transaction per batch, until a batch comes back short.
func (r *RetentionCleaner) deleteBatches(ctx context.Context, what string, del func(store.Tx) (int, error)) (int, error) {
	total := 0
	for {
		var n int
		err := r.engine.fenced(ctx, r.cfg.Fence, func(tx store.Tx) error {
			var err error
			n, err = del(tx)
			return err
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("delete expired %s: %w", what, err)
		}
		if n < r.cfg.Batch {
			return total, nil
		}
	}
}

// Package retention keeps the database's tables bounded under a constant load: its Cleaner,
// a leader loop, deletes terminal jobs, audit rows and ended leases once they are older than
// their configured retention. Stream trimming is the reclaimer package's Trimmer.
package retention

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/store"
)

// Store is what the Cleaner needs of the store: short transactions, one per batch
// (store.Store is one).
type Store interface {
	WithTx(ctx context.Context, fn func(tx store.Tx) error) error
}

// Fence guards the writes of a leader: it runs first in every transaction and refuses it
// (wrapping store.ErrFenced) once this instance no longer leads.
type Fence = store.Fence

// Config configures a Cleaner. How long rows are kept comes from the orchestrator's
// configuration: job_types.<type>.retention, dead_letter_retention, audit_retention (audit
// rows and ended leases).
type Config struct {
	// Interval between passes (± 10% jitter); default config.RetentionIntervalDefault.
	Interval time.Duration
	// Batch is the most rows one DELETE removes (default config.RetentionBatchDefault): each
	// batch is its own short transaction, so the hot path never waits long behind it.
	Batch int
	// Fence guards the deletions of a leader (nil: none).
	Fence Fence
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
	// Clock is the time source (default time.Now); the engine's, so that retention and the
	// rows' timestamps agree.
	Clock func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Result counts what one pass deleted.
type Result struct {
	Jobs   int
	Audit  int
	Leases int
	// Deliveries are webhook deliveries that ended (delivered or given up) before
	// webhooks.retention, with their attempts.
	Deliveries int
	// Flows counts the rows of flows whose jobs are gone (dependencies, approval requests)
	// and the workflows that ended before the longest retention of a type.
	Flows int
}

// Cleaner is the leader loop that keeps the tables bounded under a constant load: it deletes
// terminal jobs older than their retention (done and cancelled jobs, and purged dead letters,
// after their type's retention; other dead letters after dead_letter_retention), and audit
// rows and ended (released or expired) leases older than audit_retention: every attempt leaves
// a lease row behind, the record of what it held, which is kept as long as the audit trail
// that names it. Jobs of types no longer configured are deleted after the longest retention
// of any type.
type Cleaner struct {
	startstop.Base
	store Store
	conf  *config.Config
	cfg   Config
	log   *slog.Logger
}

// NewCleaner returns a Cleaner over st, keeping rows as long as conf says.
func NewCleaner(st Store, conf *config.Config, cfg Config) *Cleaner {
	cfg.Interval = cmp.Or(cfg.Interval, config.RetentionIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, config.RetentionBatchDefault)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Cleaner{store: st, conf: conf, cfg: cfg,
		log: logging.Component(cfg.Logger, "retention")}
}

// Start runs the cleaner until ctx ends or Stop is called. It returns at once.
func (r *Cleaner) Start(ctx context.Context) error {
	return r.StartLoop(ctx, startstop.Every(r.cfg.Interval, r.cfg.Stagger, nil, r.log), func(ctx context.Context) error {
		res, err := r.RunOnce(ctx)
		if res.Jobs > 0 || res.Audit > 0 || res.Leases > 0 || res.Deliveries > 0 || res.Flows > 0 {
			r.log.Info("deleted expired rows", "jobs", res.Jobs, "audit", res.Audit, "leases", res.Leases,
				"webhook_deliveries", res.Deliveries, "flows", res.Flows)
		}
		return err
	})
}

// RunOnce runs one pass (the loop's body; tools and tests call it directly): it deletes
// everything that is past its retention now, batch after batch.
func (r *Cleaner) RunOnce(ctx context.Context) (Result, error) {
	// UTC at the database's precision, as the engine writes the rows.
	now := r.cfg.Clock().UTC().Truncate(time.Microsecond)
	conf := r.conf
	dlRetention := cmp.Or(conf.DeadLetterRetention, config.DeadLetterRetentionDefault)
	var (
		res     Result
		names   = conf.TypeNames()
		longest = config.RetentionDefault
	)
	for _, name := range names {
		keep := cmp.Or(conf.JobTypes[name].Retention, config.RetentionDefault)
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
	auditBefore := now.Add(-cmp.Or(conf.AuditRetention, config.AuditRetentionDefault))
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
	if err != nil {
		return res, err
	}
	deliveriesBefore := now.Add(-cmp.Or(conf.Webhooks.Retention, config.WebhooksRetentionDefault))
	n, err = r.deleteBatches(ctx, "finished webhook deliveries", func(tx store.Tx) (int, error) {
		return tx.WebhookDeleteFinished(ctx, deliveriesBefore, r.cfg.Batch)
	})
	res.Deliveries += n
	if err != nil {
		return res, err
	}
	res.Flows, err = r.deleteFlows(ctx, now.Add(-longest))
	return res, err
}

// deleteFlows deletes what flows keep beside their jobs once those are gone: the dependency
// rows and approval requests of deleted jobs, and the workflows that ended before
// workflowsBefore (the longest retention of a type: their steps' jobs are gone by then).
func (r *Cleaner) deleteFlows(ctx context.Context, workflowsBefore time.Time) (int, error) {
	total := 0
	for _, d := range []struct {
		what string
		del  func(store.Tx) (int, error)
	}{
		{"job dependencies", func(tx store.Tx) (int, error) { return tx.JobDepsDeleteOrphans(ctx, r.cfg.Batch) }},
		{"approval requests", func(tx store.Tx) (int, error) { return tx.ApprovalDeleteOrphans(ctx, r.cfg.Batch) }},
		{"workflows", func(tx store.Tx) (int, error) { return tx.WorkflowDeleteFinished(ctx, workflowsBefore, r.cfg.Batch) }},
	} {
		n, err := r.deleteBatches(ctx, d.what, d.del)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// deleteJobs deletes the jobs of p in batches.
func (r *Cleaner) deleteJobs(ctx context.Context, p store.JobDeleteParams) (int, error) {
	p.Limit = r.cfg.Batch
	return r.deleteBatches(ctx, string(p.Status)+" jobs", func(tx store.Tx) (int, error) {
		return tx.JobDeleteTerminal(ctx, p)
	})
}

// deleteBatches runs del, one fenced transaction per batch, until a batch comes back short.
func (r *Cleaner) deleteBatches(ctx context.Context, what string, del func(store.Tx) (int, error)) (int, error) {
	total := 0
	for {
		var n int
		err := store.WithFence(ctx, r.store, r.cfg.Fence, func(tx store.Tx) error {
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

package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/tracing"
)

// Dispatcher defaults.
const (
	DispatcherIntervalDefault = time.Second
	DispatcherBatchDefault    = 500
)

// DispatcherConfig configures a Dispatcher.
type DispatcherConfig struct {
	// Interval between passes (± 10% jitter).
	Interval time.Duration
	// Batch is the most jobs one query publishes; a pass repeats while batches come back full.
	Batch int
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
	// Fence guards the enqueued marks of a leader (nil: none).
	Fence Fence
}

// Dispatcher is the outbox relay: it publishes every due pending job that is not enqueued (a
// crash between a submit's commit and its XADD, retries whose backoff elapsed, replays). A job
// never attempted is left to its submit for PublishGrace after its creation.
// Duplicate publications are harmless: claiming is a compare-and-set on the job row.
type Dispatcher struct {
	startstop.Base
	engine *Engine
	cfg    DispatcherConfig
	log    *slog.Logger
	wake   chan struct{}
}

// NewDispatcher returns a Dispatcher publishing through e.
func NewDispatcher(e *Engine, cfg DispatcherConfig) *Dispatcher {
	cfg.Interval = cmp.Or(cfg.Interval, DispatcherIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, DispatcherBatchDefault)
	return &Dispatcher{engine: e, cfg: cfg, log: e.log.With("component", "dispatcher"), wake: make(chan struct{}, 1)}
}

// Start runs the dispatcher until ctx ends or Stop is called. It returns at once.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.Go(ctx, func(ctx context.Context) {
		startstop.Loop(ctx, startstop.LoopParams{
			Interval: d.cfg.Interval, Jitter: 0.1, Stagger: d.cfg.Stagger, Wake: d.wake, Logger: d.log,
		}, func(ctx context.Context) error {
			_, err := d.RunOnce(ctx)
			return err
		})
	})
	return nil
}

// Wake asks for a pass soon (e.g. after a replay).
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// RunOnce publishes every job due now and returns how many it published.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	total := 0
	for {
		now := d.engine.nowUTC()
		jobs, err := d.engine.store.JobListDispatchable(ctx, store.DispatchParams{
			Now: now, SubmittedBy: now.Add(-PublishGrace), Limit: d.cfg.Batch,
		})
		if err != nil {
			return total, fmt.Errorf("list dispatchable jobs: %w", err)
		}
		if len(jobs) == 0 {
			return total, nil
		}
		pctx, span := tracing.Start(ctx, "engine.dispatch")
		n, err := d.engine.publishFenced(pctx, jobs, d.cfg.Fence)
		tracing.End(span, err)
		total += n
		if err != nil {
			return total, fmt.Errorf("publish %d jobs: %w", len(jobs), err)
		}
		d.log.Debug("published due jobs", "count", n)
		if n == 0 || len(jobs) < d.cfg.Batch {
			return total, nil
		}
	}
}

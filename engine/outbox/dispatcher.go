package outbox

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/internal/logging"
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
	Fence store.Fence
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Relayer publishes the jobs that are due and unpublished (engine.Engine, over its Outbox and
// its clock).
type Relayer interface {
	// PublishDue publishes up to limit of them and marks them enqueued behind fence; full
	// reports that the batch was full (more may be waiting).
	PublishDue(ctx context.Context, fence store.Fence, limit int) (published int, full bool, err error)
}

// Dispatcher is the outbox relay: it publishes every due pending job that is not enqueued (a
// crash between a submit's commit and its XADD, retries whose backoff elapsed, replays). A job
// never attempted is left to its submit for PublishGrace after its creation. Duplicate
// publications are harmless: claiming is a compare-and-set on the job row.
type Dispatcher struct {
	startstop.Base
	relayer Relayer
	cfg     DispatcherConfig
	log     *slog.Logger
	wake    chan struct{}
}

// NewDispatcher returns a Dispatcher publishing through r.
func NewDispatcher(r Relayer, cfg DispatcherConfig) *Dispatcher {
	cfg.Interval = cmp.Or(cfg.Interval, DispatcherIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, DispatcherBatchDefault)
	log := logging.Component(cfg.Logger, "dispatcher")
	return &Dispatcher{relayer: r, cfg: cfg, log: log, wake: make(chan struct{}, 1)}
}

// Start runs the dispatcher until ctx ends or Stop is called. It returns at once.
func (d *Dispatcher) Start(ctx context.Context) error {
	return d.StartLoop(ctx, startstop.Every(d.cfg.Interval, d.cfg.Stagger, d.wake, d.log), startstop.Pass(d.RunOnce))
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
		pctx, span := tracing.Start(ctx, "engine.dispatch")
		n, full, err := d.relayer.PublishDue(pctx, d.cfg.Fence, d.cfg.Batch)
		tracing.End(span, err)
		total += n
		if err != nil {
			return total, err
		}
		if n > 0 {
			d.log.Debug("published due jobs", "count", n)
		}
		if n == 0 || !full {
			return total, nil
		}
	}
}

// PublishDue lists up to limit pending jobs that are due at now and not enqueued (a job never
// attempted only once PublishGrace has passed since its creation), publishes them and marks
// them enqueued behind fence. full reports that the list was full.
func (o *Outbox[S]) PublishDue(ctx context.Context, fence store.Fence, now time.Time, limit int) (published int, full bool, err error) {
	jobs, err := o.store.JobListDispatchable(ctx, store.DispatchParams{
		Now: now, SubmittedBy: now.Add(-PublishGrace), Limit: limit, Scheduled: o.scheduled,
	})
	if err != nil {
		return 0, false, fmt.Errorf("list dispatchable jobs: %w", err)
	}
	if len(jobs) == 0 {
		return 0, false, nil
	}
	n, err := o.Publish(ctx, jobs, Mark{Fence: fence})
	if err != nil {
		return n, false, fmt.Errorf("publish %d jobs: %w", len(jobs), err)
	}
	return n, len(jobs) >= limit, nil
}

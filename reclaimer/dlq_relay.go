package reclaimer

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
)

// DLQRelay defaults.
const (
	DLQRelayIntervalDefault = time.Second
	DLQRelayBatchDefault    = 100
)

// DeadLetterRelayer is what the DLQRelay needs from the job engine (engine.Engine): publishing
// one batch of dead letters to the DLQ stream and marking them published.
type DeadLetterRelayer interface {
	// RelayDeadLetters publishes up to limit unpublished dead letters, marks them published
	// behind fence, and reports how many it published and whether the batch was full.
	RelayDeadLetters(ctx context.Context, fence engine.Fence, limit int) (published int, full bool, err error)
}

// DLQRelayConfig configures a DLQRelay.
type DLQRelayConfig struct {
	// Interval between passes (± 10% jitter).
	Interval time.Duration
	// Batch is the most dead letters one pass publishes per query; a pass repeats while
	// batches come back full.
	Batch int
	// Fence guards the writes of a leader (nil: none).
	Fence engine.Fence
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// DLQRelay is the outbox relay of the dead-letter queue, the twin of the engine's Dispatcher:
// a job that is dead-lettered gets enqueued=0 in the same transaction, and the relay appends
// it to stream:orchestrator:dlq and marks it published. A crash between the two publishes it
// again; the orphaned entry is not listed (GET /dlq reads the job rows) and is trimmed with
// age.
type DLQRelay struct {
	startstop.Base
	relayer DeadLetterRelayer
	cfg     DLQRelayConfig
	log     *slog.Logger
}

// NewDLQRelay returns a DLQRelay publishing through r.
func NewDLQRelay(r DeadLetterRelayer, cfg DLQRelayConfig) *DLQRelay {
	cfg.Interval = cmp.Or(cfg.Interval, DLQRelayIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, DLQRelayBatchDefault)
	return &DLQRelay{relayer: r, cfg: cfg, log: logging.Component(cfg.Logger, "dlq_relay")}
}

// Start runs the relay until ctx ends or Stop is called. It returns at once.
func (r *DLQRelay) Start(ctx context.Context) error {
	return r.StartLoop(ctx, startstop.Every(r.cfg.Interval, r.cfg.Stagger, nil, r.log), startstop.Pass(r.RunOnce))
}

// RunOnce runs one pass (the loop's body; tools and tests call it directly): it publishes
// every unpublished dead letter and returns how many it published.
func (r *DLQRelay) RunOnce(ctx context.Context) (int, error) {
	total := 0
	for {
		n, full, err := r.relayer.RelayDeadLetters(ctx, r.cfg.Fence, r.cfg.Batch)
		total += n
		if err != nil || !full {
			return total, err
		}
	}
}

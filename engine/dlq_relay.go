package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

// DLQRelay defaults.
const (
	DLQRelayIntervalDefault = time.Second
	DLQRelayBatchDefault    = 100
)

// DLQRelayConfig configures a DLQRelay.
type DLQRelayConfig struct {
	// Interval between passes (± 10% jitter).
	Interval time.Duration
	// Batch is the most dead letters one pass publishes per query; a pass repeats while
	// batches come back full.
	Batch int
	// Fence guards the writes of a leader (nil: none).
	Fence Fence
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
}

// DLQRelay is the outbox relay of the dead-letter queue, the twin of the Dispatcher: a job
// that is dead-lettered gets enqueued=0 in the same transaction, and the relay appends it to
// stream:orchestrator:dlq and marks it published. A crash between the two publishes it again;
// the orphaned entry is not listed (GET /dlq reads the job rows) and is trimmed with age.
type DLQRelay struct {
	startstop.Base
	engine *Engine
	cfg    DLQRelayConfig
	log    *slog.Logger
}

// NewDLQRelay returns a DLQRelay publishing through e.
func NewDLQRelay(e *Engine, cfg DLQRelayConfig) *DLQRelay {
	cfg.Interval = cmp.Or(cfg.Interval, DLQRelayIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, DLQRelayBatchDefault)
	return &DLQRelay{engine: e, cfg: cfg, log: e.log.With("component", "dlq_relay")}
}

// Start runs the relay until ctx ends or Stop is called. It returns at once.
func (r *DLQRelay) Start(ctx context.Context) error {
	r.Go(ctx, func(ctx context.Context) {
		startstop.Loop(ctx, startstop.LoopParams{
			Interval: r.cfg.Interval, Jitter: 0.1, Stagger: r.cfg.Stagger, Logger: r.log,
		}, func(ctx context.Context) error {
			_, err := r.runOnce(ctx)
			return err
		})
	})
	return nil
}

// runOnce publishes every unpublished dead letter and returns how many it published.
func (r *DLQRelay) runOnce(ctx context.Context) (int, error) {
	total := 0
	for {
		n, full, err := r.engine.RelayDeadLetters(ctx, r.cfg.Fence, r.cfg.Batch)
		total += n
		if err != nil || !full {
			return total, err
		}
	}
}

// RelayDeadLetters publishes up to limit dead letters that are not on the DLQ stream yet and
// marks them published; full reports that the batch was full (more may be waiting). Entries
// whose mark did not apply (the job was replayed or purged in between) are deleted again.
func (e *Engine) RelayDeadLetters(ctx context.Context, fence Fence, limit int) (published int, full bool, err error) {
	jobs, err := e.store.JobListDeadLetterUnpublished(ctx, limit)
	if err != nil {
		return 0, false, fmt.Errorf("relay dead letters: %w", err)
	}
	if len(jobs) == 0 {
		return 0, false, nil
	}
	dls := make([]streams.DeadLetter, len(jobs))
	for i, j := range jobs {
		origin := ""
		if jt := e.cfg.JobType(j.Type); jt != nil {
			origin = jt.Stream
		}
		dls[i] = streams.DeadLetter{JobID: j.ID, OriginStream: origin, Type: j.Type, Attempts: j.Attempts, LastError: j.LastError}
	}
	ids, err := e.streams.AddDeadLetters(ctx, dls)
	if err != nil {
		return 0, false, fmt.Errorf("relay dead letters: %w", err)
	}
	marks := make([]store.JobEnqueued, len(jobs))
	for i, j := range jobs {
		marks[i] = store.JobEnqueued{ID: j.ID, Attempts: j.Attempts, StreamID: ids[i]}
	}
	var marked []string
	err = e.fenced(ctx, fence, func(tx store.Tx) error {
		var err error
		marked, err = tx.JobMarkDeadLetterPublished(ctx, marks, e.nowUTC())
		return err
	})
	if err != nil {
		// The jobs stay unpublished and the next pass (or the next leader) publishes them
		// again: remove these entries so that they do not linger as duplicates.
		if _, derr := e.streams.DeleteDeadLetters(ctx, ids...); derr != nil {
			e.log.Warn("cannot delete the DLQ entries of unmarked dead letters", "count", len(ids), "error", derr)
		}
		return 0, false, fmt.Errorf("relay dead letters: mark %d published: %w", len(marks), err)
	}
	var orphans []string
	for _, m := range marks {
		if !slices.Contains(marked, m.ID) {
			orphans = append(orphans, m.StreamID)
		}
	}
	if _, err := e.streams.DeleteDeadLetters(ctx, orphans...); err != nil {
		e.log.Warn("cannot delete the DLQ entries of replayed dead letters", "count", len(orphans), "error", err)
	}
	return len(marked), len(jobs) >= limit, nil
}

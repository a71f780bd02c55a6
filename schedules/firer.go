package schedules

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/store"
)

// Firer defaults.
const (
	// FirerBatchDefault is the most schedules one pass handles (and the most running fires it
	// looks at); a pass that found a full batch runs again at once.
	FirerBatchDefault = 100
	// pruneEvery is how often the firer deletes old fires.
	pruneEvery = time.Minute
	// minSleep keeps a firer whose next fire time is due already from spinning.
	minSleep = 5 * time.Millisecond
)

// Store is what the Firer reads and writes outside the engine's transactions (store.Store has
// it).
type Store interface {
	store.TxRunner
	ScheduleListDue(ctx context.Context, now time.Time, limit int) ([]string, error)
	ScheduleNextFire(ctx context.Context) (time.Time, bool, error)
	ScheduleFireList(ctx context.Context, p store.ScheduleFireListParams) ([]store.ScheduleFire, error)
	JobHolders(ctx context.Context, ids []string) ([]store.JobHolder, error)
}

// FirerConfig configures a Firer.
type FirerConfig struct {
	// Interval is the longest the firer sleeps (default config.SchedulesIntervalDefault).
	Interval time.Duration
	// MisfireGrace is how late a fire time may be handled as on time (default
	// config.SchedulesMisfireGraceDefault).
	MisfireGrace time.Duration
	// MaxQueued bounds each schedule's queued fires (default config.SchedulesMaxQueuedDefault).
	MaxQueued int
	// Retention is how long ended and skipped fires are kept (default
	// config.AuditRetentionDefault: as long as the audit rows that tell the same).
	Retention time.Duration
	// Batch is the most schedules one pass handles (default FirerBatchDefault).
	Batch int
	// Fence guards every write of a pass (nil: none; the leader wiring passes its term's).
	Fence engine.Fence
	// Metrics counts fires and skips (nil: none).
	Metrics *Metrics
	// Stagger delays the first pass randomly, by up to Interval (off in tests).
	Stagger bool
	// Clock is the time source (default time.Now): the engine's, so that a job's creation and
	// its fire time compare.
	Clock func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// FirerConfigFrom fills c's unset fields from the configuration's schedules section.
func FirerConfigFrom(cfg *config.Config, c FirerConfig) FirerConfig {
	c.Interval = cmp.Or(c.Interval, cfg.Schedules.Interval)
	c.MisfireGrace = cmp.Or(c.MisfireGrace, cfg.Schedules.MisfireGrace)
	c.MaxQueued = cmp.Or(c.MaxQueued, cfg.Schedules.MaxQueued)
	c.Retention = cmp.Or(c.Retention, cfg.AuditRetention)
	return c
}

// Result is what one pass did.
type Result struct {
	Outcome
	// Schedules is how many schedules the pass handled.
	Schedules int
	// Ended counts the fires whose jobs the pass saw ended.
	Ended int
	// Pruned counts the old fires it deleted.
	Pruned int
	// NextWake is when the next pass should run: the earliest next fire time, at most one
	// Interval ahead (now: there is more to do).
	NextWake time.Time
}

// Firer is the leader loop that makes the schedules' fires: it wakes at the earliest next fire
// time (and at least every Interval), and in one fenced transaction per schedule makes the
// jobs of the queued fires that may go and of the fire times that came (fireSchedule). It
// also records the end of the fires' jobs, and deletes old fires.
type Firer struct {
	startstop.Base
	st        Store
	eng       Engine
	cfg       FirerConfig
	log       *slog.Logger
	lastPrune time.Time
	// The last queued and running fires a pass read: the next pass reads on from them, so
	// that fires beyond a batch (a paused schedule's queued ones, jobs that run for days) do
	// not hide the others.
	queuedAfter, runningAfter *store.ScheduleFire
}

// NewFirer returns a Firer over st and eng.
func NewFirer(st Store, eng Engine, cfg FirerConfig) *Firer {
	cfg.Interval = cmp.Or(cfg.Interval, config.SchedulesIntervalDefault)
	cfg.MisfireGrace = cmp.Or(cfg.MisfireGrace, config.SchedulesMisfireGraceDefault)
	cfg.MaxQueued = cmp.Or(cfg.MaxQueued, config.SchedulesMaxQueuedDefault)
	cfg.Retention = cmp.Or(cfg.Retention, config.AuditRetentionDefault)
	cfg.Batch = cmp.Or(cfg.Batch, FirerBatchDefault)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Firer{st: st, eng: eng, cfg: cfg, log: logging.Component(cfg.Logger, "schedules")}
}

// Start runs the firer until ctx ends or Stop is called. It returns at once.
func (f *Firer) Start(ctx context.Context) error {
	f.Go(ctx, f.loop)
	return nil
}

// loop runs a pass, then sleeps until the pass's NextWake (at most Interval), until ctx ends.
func (f *Firer) loop(ctx context.Context) {
	delay := time.Duration(0)
	if f.cfg.Stagger {
		delay = time.Duration(rand.Int64N(int64(f.cfg.Interval) + 1))
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := f.RunOnce(ctx)
		switch {
		case err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil:
			f.log.Error("pass failed", "error", err)
			f.cfg.Metrics.failed()
			t.Reset(startstop.Jitter(f.cfg.Interval, 0.1))
			continue
		case len(res.Fired) > 0 || len(res.Skipped) > 0:
			f.log.Debug("fired", "fired", len(res.Fired), "skipped", res.Skipped, "queued", res.Queued)
		}
		t.Reset(min(max(res.NextWake.Sub(f.cfg.Clock()), minSleep), f.cfg.Interval))
	}
}

// RunOnce runs one pass at the clock's now (the loop's body; tests call it directly): it
// records the fires whose jobs ended, fires every schedule that is due or has queued fires,
// deletes old fires once a minute, and says when to run next.
func (f *Firer) RunOnce(ctx context.Context) (Result, error) {
	now := f.cfg.Clock().UTC().Truncate(time.Microsecond)
	var res Result
	ended, err := f.recordEnded(ctx)
	res.Ended = ended
	if err != nil {
		return res, err
	}
	ids, full, err := f.work(ctx, now)
	if err != nil {
		return res, err
	}
	f.cfg.Metrics.seen(ids)
	var errs []error
	for _, id := range ids {
		for {
			out, err := fireSchedule(ctx, f.eng, f.cfg.Fence, id, now, f.cfg.MisfireGrace, f.cfg.MaxQueued)
			if err != nil {
				if errors.Is(err, store.ErrFenced) || ctx.Err() != nil {
					return res, err // not the leader any more: stop
				}
				errs = append(errs, err) // the others go on; this one is tried again next pass
				break
			}
			f.cfg.Metrics.observe(out)
			res.add(out)
			if !out.Partial {
				break
			}
		}
		res.Schedules++
	}
	// A schedule that failed is tried again next pass; the others' pruning and the next wake
	// go on regardless.
	if now.Sub(f.lastPrune) >= pruneEvery {
		if res.Pruned, err = f.prune(ctx, now); err != nil {
			errs = append(errs, err)
		} else {
			f.lastPrune = now
		}
	}
	if res.NextWake, err = f.nextWake(ctx, now, full); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// work lists the schedules a pass handles: those due at now and those with queued fires;
// full says there may be more of either.
func (f *Firer) work(ctx context.Context, now time.Time) (ids []string, full bool, err error) {
	due, err := f.st.ScheduleListDue(ctx, now, f.cfg.Batch)
	if err != nil {
		return nil, false, err
	}
	queued, err := f.rotate(ctx, store.FireQueued, &f.queuedAfter)
	if err != nil {
		return nil, false, err
	}
	ids = due
	for _, q := range queued {
		if !slices.Contains(ids, q.ScheduleID) {
			ids = append(ids, q.ScheduleID)
		}
	}
	return ids, len(due) == f.cfg.Batch, nil
}

// rotate reads a batch of the fires in state after *after and moves *after on: to the last of
// a full batch, or back to the start after a short one.
func (f *Firer) rotate(ctx context.Context, state store.FireState, after **store.ScheduleFire) ([]store.ScheduleFire, error) {
	fires, err := f.st.ScheduleFireList(ctx, store.ScheduleFireListParams{State: state, After: *after, Limit: f.cfg.Batch})
	if err != nil {
		return nil, err
	}
	*after = nil
	if len(fires) == f.cfg.Batch {
		last := fires[len(fires)-1]
		*after = &last
	}
	return fires, nil
}

// recordEnded marks the running fires whose jobs ended, so that they stop counting against
// max_concurrent and can be deleted once old, and keeps the status of their jobs, which
// retention may delete first.
func (f *Firer) recordEnded(ctx context.Context) (int, error) {
	running, err := f.rotate(ctx, store.FireRunning, &f.runningAfter)
	if err != nil {
		return 0, err
	}
	ended, err := endedFires(ctx, f.st, running)
	if err != nil || len(ended) == 0 {
		return 0, err
	}
	err = store.WithFence(ctx, f.st, f.cfg.Fence, func(tx store.Tx) error {
		for _, fr := range ended {
			// A fire deleted meanwhile (its schedule was) has nothing left to record.
			if err := tx.ScheduleFireUpdate(ctx, fr); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("record the end of fires: %w", err)
	}
	return len(ended), nil
}

// prune deletes the ended and skipped fires older than the retention, in short fenced batches.
func (f *Firer) prune(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		var n int
		err := store.WithFence(ctx, f.st, f.cfg.Fence, func(tx store.Tx) error {
			var err error
			n, err = tx.ScheduleFireDeleteBefore(ctx, now.Add(-f.cfg.Retention), f.cfg.Batch)
			return err
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("delete old fires: %w", err)
		}
		if n < f.cfg.Batch {
			return total, nil
		}
	}
}

// nextWake is the earliest next fire time, at most Interval ahead; now when the pass left
// work (a full batch).
func (f *Firer) nextWake(ctx context.Context, now time.Time, full bool) (time.Time, error) {
	if full {
		return now, nil
	}
	wake := now.Add(f.cfg.Interval)
	at, ok, err := f.st.ScheduleNextFire(ctx)
	if err != nil {
		return wake, err
	}
	if ok && at.Before(wake) {
		wake = at
	}
	return wake, nil
}

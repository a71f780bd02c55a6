// Package scheduler is the leader's GPU scheduler loop: it runs engine.Engine.Schedule's passes,
// woken at once when GPU work or room may be waiting (Waker) and on a slow tick, and counts what
// they do. The placement itself, in one fenced transaction, is the engine's (engine/schedule.go).
package scheduler

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// Engine is what the scheduler drives (*engine.Engine).
type Engine interface {
	Schedule(ctx context.Context, p engine.ScheduleParams) (engine.ScheduleResult, error)
}

// Config configures a Scheduler.
type Config struct {
	// Interval is the slow tick (± 10%) between passes nothing woke (default
	// config.SchedulerIntervalDefault).
	Interval time.Duration
	// Policy, ReserveAfter and Batch: see config.Scheduler.
	Policy       leases.Policy
	ReserveAfter time.Duration
	Batch        int
	// Wakes triggers a pass at once (Waker.C); nil: the tick only.
	Wakes <-chan struct{}
	// Fence guards every write of a pass (the leader's term).
	Fence engine.Fence
	// Metrics counts placements and waiting jobs (nil: none).
	Metrics *Metrics
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// ConfigFrom takes the scheduler settings of the process configuration.
func ConfigFrom(app *config.Config, c Config) Config {
	c.Interval = cmp.Or(c.Interval, app.Scheduler.Interval)
	c.Policy = cmp.Or(c.Policy, leases.Policy(app.Scheduler.Policy))
	c.ReserveAfter = cmp.Or(c.ReserveAfter, app.Scheduler.ReserveAfter)
	c.Batch = cmp.Or(c.Batch, app.Scheduler.Batch)
	return c
}

// maxRounds bounds the passes one wake runs back to back while they place jobs from a full
// batch.
const maxRounds = 20

// Scheduler runs the passes. Its state, the node held for a blocked job, is only an
// optimization of the next pass: a new leader starts from the database alone.
type Scheduler struct {
	startstop.Base
	eng  Engine
	cfg  Config
	log  *slog.Logger
	held engine.Hold
}

// New returns a Scheduler over eng.
func New(eng Engine, cfg Config) *Scheduler {
	cfg.Interval = cmp.Or(cfg.Interval, config.SchedulerIntervalDefault)
	cfg.Policy = cmp.Or(cfg.Policy, leases.PolicyBestFit)
	cfg.Batch = cmp.Or(cfg.Batch, config.SchedulerBatchDefault)
	return &Scheduler{eng: eng, cfg: cfg, log: logging.Component(cfg.Logger, "scheduler")}
}

// Start runs the scheduler until ctx ends or Stop is called. It returns at once.
func (s *Scheduler) Start(ctx context.Context) error {
	p := startstop.Every(s.cfg.Interval, s.cfg.Stagger, s.cfg.Wakes, s.log)
	p.Failed = s.cfg.Metrics.failed
	return s.StartLoop(ctx, p, startstop.Pass(s.RunOnce))
}

// Stop stops the loop; the waiting-jobs gauge is the leader's, and this instance no longer
// runs passes to keep it true, so its series go.
func (s *Scheduler) Stop() {
	s.Base.Stop()
	s.cfg.Metrics.clear()
}

// RunOnce runs passes until one places nothing or sees less than a full batch, and returns
// what they did together. A fenced pass stops at once: this instance no longer leads.
func (s *Scheduler) RunOnce(ctx context.Context) (engine.ScheduleResult, error) {
	var total engine.ScheduleResult
	for range maxRounds {
		res, err := s.eng.Schedule(ctx, engine.ScheduleParams{
			Fence: s.cfg.Fence, Batch: s.cfg.Batch, Policy: s.cfg.Policy, ReserveAfter: s.cfg.ReserveAfter, Held: s.held,
		})
		total.Placed = append(total.Placed, res.Placed...)
		total.Published += res.Published
		if err != nil {
			if errors.Is(err, store.ErrFenced) {
				s.held = engine.Hold{}
			}
			// Placements a failed publish followed were committed: they count.
			s.cfg.Metrics.placed(total.Placed)
			return total, err
		}
		s.note(res)
		total.Waiting, total.Held = res.Waiting, res.Held
		if !res.Full || len(res.Placed) == 0 {
			break
		}
	}
	s.cfg.Metrics.observe(total)
	return total, nil
}

// note keeps the pass's hold and logs what changed.
func (s *Scheduler) note(res engine.ScheduleResult) {
	if res.Held != s.held && res.Held.JobID != "" {
		s.log.Info("node held for a blocked gpu job", "job_id", res.Held.JobID, "node_id", res.Held.Node)
	}
	s.held = res.Held
	for _, p := range res.Placed {
		s.log.Debug("gpu job placed", "job_id", p.JobID, "node_id", p.Node, "gpus", p.GPUs,
			"waited_ms", p.Waited.Milliseconds())
	}
}

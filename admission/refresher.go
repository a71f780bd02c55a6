package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/internal/startstop"
)

// refresherJitter spreads the refreshes of many instances over the interval.
const refresherJitter = 0.1

// Refresher is the loop that keeps a Controller's caches current: every refresh interval it
// rereads admission_policies (whole: a few hundred rows at most), measures the GPU pressure
// from gpu_devices and feeds it to the GPU gate, counts the backlog of the types with a
// queue_limit, and pings Redis for the limiter's health. Every instance runs one, leader or
// not: each makes its own decisions from the shared database, so a policy change made on one
// instance takes effect on all within one interval.
type Refresher struct {
	startstop.Base
	c        *Controller
	interval time.Duration
}

// RefreshResult is what one pass saw.
type RefreshResult struct {
	// Policies is the number of policy rows read (-1: not applied, a local change raced it).
	Policies int
	// Pressure is the GPU measurement fed to the gate.
	Pressure Pressure
	// GateChanged reports that the GPU gate opened or closed.
	GateChanged bool
	// Backlog is the pending jobs of each limited type.
	Backlog map[string]int
}

func newRefresher(c *Controller, interval time.Duration) *Refresher {
	return &Refresher{c: c, interval: interval}
}

// Start starts the loop and returns at once. The first pass comes after one interval (the
// Controller loads its caches itself before starting the loop).
func (r *Refresher) Start(ctx context.Context) error {
	return r.StartLoop(ctx, startstop.LoopParams{
		Interval: r.interval, Jitter: refresherJitter, Logger: r.c.log,
	}, startstop.Pass(r.runOnce))
}

// runOnce is one pass. Each part runs even when another failed; the errors are joined.
func (r *Refresher) runOnce(ctx context.Context) (RefreshResult, error) {
	c := r.c
	res := RefreshResult{Policies: -1}
	var errs []error

	gen := c.policies.generation()
	rows, err := c.store.AdmissionPolicyList(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("refresh admission policies: %w", err))
	} else if added, applied := c.policies.replace(rows, gen, c.now()); applied {
		res.Policies = len(rows)
		for _, agent := range added {
			c.metrics.precreate(agent)
		}
	}
	if c.cfg.Disabled {
		return res, errors.Join(errs...)
	}

	gpus, err := c.store.GPUList(ctx, "")
	if err != nil {
		errs = append(errs, fmt.Errorf("refresh gpu pressure: %w", err))
	} else {
		res.Pressure = MeasurePressure(gpus, c.now(), c.freshness)
		if res.GateChanged = c.gpu.Observe(res.Pressure); res.GateChanged {
			r.logGate(res.Pressure)
		}
	}

	if types := c.queues.types(); len(types) > 0 {
		exclude := c.queues.beginCount()
		counts, err := c.store.JobCountPending(ctx, types, exclude)
		if err != nil {
			errs = append(errs, fmt.Errorf("refresh queue backlogs: %w", err))
			c.queues.endCount(nil, c.now())
		} else {
			c.queues.endCount(counts, c.now())
			res.Backlog = counts
		}
	}

	// The limiter logs its own transitions; an error per pass would repeat them every second.
	_ = c.limiter.Ping(ctx)
	c.limiter.stash.sweep(time.Now())
	return res, errors.Join(errs...)
}

// logGate says loudly that GPU admission closed or reopened, with the figures.
func (r *Refresher) logGate(p Pressure) {
	st := r.c.gpu.State()
	attrs := []any{"pressure_pct", round1(p.Ratio * 100), "used_mb", p.UsedMB, "total_mb", p.TotalMB,
		"fresh_gpus", p.FreshGPUs, "high_watermark_pct", st.HighPct, "low_watermark_pct", st.LowPct}
	if st.Closed {
		r.c.log.Warn("GPU admission closed: cluster GPU memory above the high watermark; GPU job types and GPU leases are refused with gpu_pressure",
			append(attrs, "hold_until", st.HoldUntil)...)
		return
	}
	r.c.log.Info("GPU admission reopened: cluster GPU memory below the low watermark", attrs...)
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

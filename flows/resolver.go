// Package flows runs the leader's loops of jobs that wait for other jobs and of approvals: the
// Resolver, which moves waiting jobs on once their parents have ended (engine/flows*.go), the
// ApprovalExpirer, which ends approval requests past their TTL, and, on every instance, the
// PolicyRefresher, which keeps the engine's approval policies up to date. The decisions and
// their transactions are the engine's; these loops only pace them.
package flows

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/logging"
	"github.com/gpuorch/orchestrator/internal/startstop"
)

// Resolver defaults.
const (
	// ResolverIntervalDefault is the slow tick between passes nothing woke.
	ResolverIntervalDefault = config.FlowsResolveIntervalDefault
	// ResolverBatchDefault bounds the waiting jobs one query of a pass returns.
	ResolverBatchDefault = config.FlowsResolveBatchDefault
)

// Resolving is what the Resolver drives (*engine.Engine).
type Resolving interface {
	ResolveFlows(ctx context.Context, fence engine.Fence, batch int) (engine.ResolveResult, error)
}

// ResolverConfig configures a Resolver.
type ResolverConfig struct {
	// Interval is the slow tick (± 10%) between passes nothing woke (default
	// ResolverIntervalDefault).
	Interval time.Duration
	// Batch is the most waiting jobs one query returns (default ResolverBatchDefault).
	Batch int
	// Wakes triggers a pass at once: the end of a job others wait for, a submit of waiting
	// jobs (a scheduler.Waker on streams.TopicFlows); nil: the tick only.
	Wakes <-chan struct{}
	// Fence guards every write of a pass (the leader's term).
	Fence engine.Fence
	// Stagger delays the first pass randomly (off in tests).
	Stagger bool
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Resolver is the leader's loop that moves waiting jobs on: released to pending once their
// parents have ended done, cancelled when one failed, fan-out parents ended with their
// children, workflows ended with their steps. Level-based: every pass reads what is ready from
// the database, whatever woke it, so a lost wake costs at most one interval and a new leader
// starts from the database alone.
type Resolver struct {
	startstop.Base
	eng Resolving
	cfg ResolverConfig
	log *slog.Logger
}

// NewResolver returns a Resolver over eng.
func NewResolver(eng Resolving, cfg ResolverConfig) *Resolver {
	cfg.Interval = cmp.Or(cfg.Interval, ResolverIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, ResolverBatchDefault)
	return &Resolver{eng: eng, cfg: cfg, log: logging.Component(cfg.Logger, "resolver")}
}

// Start runs the resolver until ctx ends or Stop is called. It returns at once.
func (r *Resolver) Start(ctx context.Context) error {
	return r.StartLoop(ctx, startstop.Every(r.cfg.Interval, r.cfg.Stagger, r.cfg.Wakes, r.log), startstop.Pass(r.RunOnce))
}

// RunOnce runs one pass (the loop's body; tests call it directly).
func (r *Resolver) RunOnce(ctx context.Context) (engine.ResolveResult, error) {
	res, err := r.eng.ResolveFlows(ctx, r.cfg.Fence, r.cfg.Batch)
	if res != (engine.ResolveResult{}) {
		r.log.Debug("resolved waiting jobs", "released", res.Released, "cancelled", res.Cancelled,
			"fan_outs_done", res.FanOutsDone, "fan_outs_failed", res.FanOutsFailed,
			"children_cancelled", res.ChildrenCancelled, "workflows_ended", res.WorkflowsEnded)
	}
	return res, err
}

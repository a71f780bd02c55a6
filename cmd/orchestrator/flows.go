package main

import (
	"context"
	"log/slog"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/flows"
	"github.com/gpuorch/orchestrator/scheduler"
)

// resolverLoop is the leader's flows resolver (flows.Resolver), woken through waker.
func resolverLoop(cfg *config.Config, eng *engine.Engine, waker *scheduler.Waker, log *slog.Logger) func(term int64, fence engine.Fence) loop {
	return func(_ int64, fence engine.Fence) loop {
		r := flows.NewResolver(eng, flows.ResolverConfig{
			Interval: cfg.Flows.ResolveInterval, Batch: cfg.Flows.ResolveBatch, Wakes: waker.C(), Fence: fence, Logger: log,
		})
		return &listeningLoop{loop: r, listen: waker.Listen}
	}
}

// approvalExpirerLoop is the leader's approval expirer (flows.ApprovalExpirer).
func approvalExpirerLoop(cfg *config.Config, eng *engine.Engine, log *slog.Logger) func(term int64, fence engine.Fence) loop {
	return func(_ int64, fence engine.Fence) loop {
		return flows.NewApprovalExpirer(eng, flows.ApprovalExpirerConfig{
			Interval: cfg.Approvals.ExpireInterval, Fence: fence, Stagger: true, Logger: log,
		})
	}
}

// startPolicyRefresher starts, on every instance, the reading of the approval policies set at
// run time into eng (the first read before it returns); stop stops it.
func startPolicyRefresher(ctx context.Context, cfg *config.Config, eng *engine.Engine, log *slog.Logger) (stop func()) {
	r := flows.NewPolicyRefresher(eng, flows.PolicyRefresherConfig{Interval: cfg.Approvals.RefreshInterval, Logger: log})
	_ = r.Start(ctx) // returns at once after the first read
	return r.Stop
}

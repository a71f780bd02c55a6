package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/webhooks"
)

// hookWork is the webhooks' part of the process: the API's subscriptions service and pre-run
// hooks, which every instance serves, and the leader's tail and sender, one pair per term
// (leaderLoop, an extra loop of leaderWork).
type hookWork struct {
	svc     *webhooks.Service
	preRun  *webhooks.PreRun
	metrics *webhooks.Metrics
	st      store.Store
	cfg     *config.Config
	log     *slog.Logger
}

// newHookWork builds the webhooks' services over st and registers their event metrics on om
// (the scrape-time collector is registerMetrics').
func newHookWork(cfg *config.Config, st store.Store, om *metrics.Registry, log *slog.Logger) (*hookWork, error) {
	if err := cfg.Webhooks.RequirePreRunSecret(); err != nil {
		return nil, err
	}
	m := webhooks.NewMetrics()
	if err := om.Register(m); err != nil {
		return nil, fmt.Errorf("register webhook metrics: %w", err)
	}
	if types := len(cfg.Webhooks.PreRun); types > 0 {
		log.Info("pre-run hooks configured", "types", types)
	}
	return &hookWork{
		svc:     webhooks.NewService(st, cfg, webhooks.ServiceOptions{}),
		preRun:  webhooks.NewPreRun(cfg, webhooks.PreRunOptions{Metrics: m, Logger: log}),
		metrics: m, st: st, cfg: cfg, log: log,
	}, nil
}

// leaderLoop is the webhooks' extra loop of leaderWork: the tail and the sender of one term,
// both fenced by it, the tail waking the sender when it queued deliveries.
func (h *hookWork) leaderLoop(_ int64, fence engine.Fence) loop {
	wake := make(chan struct{}, 1)
	queued := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	return &hookLoops{
		tail: webhooks.NewTailer(h.st, webhooks.TailerConfigFrom(h.cfg, webhooks.TailerConfig{Fence: fence, Queued: queued,
			Stagger: true, Metrics: h.metrics, Logger: h.log})),
		send: webhooks.NewSender(h.st, webhooks.SenderConfigFrom(h.cfg, webhooks.SenderConfig{Fence: fence, Wake: wake,
			Stagger: true, Metrics: h.metrics, Logger: h.log})),
	}
}

// hookLoops runs a term's tail and sender together.
type hookLoops struct {
	tail *webhooks.Tailer
	send *webhooks.Sender
}

// Start starts both; it returns at once.
func (l *hookLoops) Start(ctx context.Context) error {
	if err := l.send.Start(ctx); err != nil {
		return err
	}
	return l.tail.Start(ctx)
}

// Stop stops both.
func (l *hookLoops) Stop() {
	l.tail.Stop()
	l.send.Stop()
}

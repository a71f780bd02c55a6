package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/scheduler"
	"github.com/gpuorch/orchestrator/telemetry"
)

// startLeaseLoops starts the telemetry poller of this orchestrator's own node, whose snapshots
// go to gpu_devices (simulated GPUs follow the node's reservations). The lease purger, which
// expires leases whose holder went quiet and rescues their jobs, is leader-only work
// (leaderWork), fenced by the term. The function returned stops the poller.
func startLeaseLoops(ctx context.Context, cfg *config.Config, lm *leases.Manager, local *localTelemetry,
	log *slog.Logger) (stop func(), err error) {
	provider, err := telemetry.Auto(cfg.NodeID, telemetry.AutoOptions{
		SimGPUs: cfg.Telemetry.SimGPUs,
		Disable: cfg.Telemetry.NVMLDisable,
		NVML:    telemetry.NVMLOptions{LibraryPath: cfg.Telemetry.NVMLLibrary, Logger: log},
		Logger:  log,
	})
	if err != nil {
		return nil, fmt.Errorf("start gpu telemetry: %w", err)
	}
	if sim, ok := provider.(*telemetry.Simulated); ok {
		provider = lm.Follow(sim, cfg.NodeID)
	}
	poller, err := telemetry.NewPoller(provider, telemetry.PollerConfig{
		Interval: cfg.Telemetry.PollInterval, Sink: lm.RecordSnapshot, Logger: log,
	})
	if err != nil {
		_ = provider.Close()
		return nil, fmt.Errorf("start gpu telemetry: %w", err)
	}
	// The lease purger is leader-only work (leadership.go).
	_ = poller.Start(ctx) // returns at once, never fails
	local.poller.Store(poller)
	return func() {
		local.poller.Store(nil)
		poller.Stop()
		if err := provider.Close(); err != nil {
			log.Warn("close gpu telemetry", "error", err)
		}
	}, nil
}

// localTelemetry is the poller of this orchestrator's own node, once it runs: GPU jobs on the
// node that end free memory that placement should see at once, not a poll interval later.
type localTelemetry struct {
	poller atomic.Pointer[telemetry.Poller]
}

// freed is engine.Options.GPUFreed: a release of GPU leases on node (this process's node)
// wakes the poller, whose next snapshot shows the memory the jobs used as free.
func (l *localTelemetry) freed(node string) func(nodeID string) {
	return func(nodeID string) {
		if p := l.poller.Load(); p != nil && nodeID == node {
			p.Wake()
		}
	}
}

// schedulerLoop is the leader's GPU scheduler of one term (none when scheduler.disabled): it
// listens for the wakes every instance publishes while the term lasts.
func schedulerLoop(cfg *config.Config, eng *engine.Engine, waker *scheduler.Waker, sm *scheduler.Metrics,
	log *slog.Logger) func(term int64, fence engine.Fence) loop {
	return func(_ int64, fence engine.Fence) loop {
		if cfg.Scheduler.Disabled {
			return nopLoop{}
		}
		s := scheduler.New(eng, scheduler.ConfigFrom(cfg, scheduler.Config{
			Wakes: waker.C(), Fence: fence, Metrics: sm, Stagger: false, Logger: log,
		}))
		return &listeningLoop{loop: s, listen: waker.Listen}
	}
}

// listeningLoop runs listen beside a loop, for as long as the loop runs.
type listeningLoop struct {
	loop
	listen func(ctx context.Context)
	cancel context.CancelFunc
}

func (l *listeningLoop) Start(ctx context.Context) error {
	ctx, l.cancel = context.WithCancel(ctx)
	l.listen(ctx)
	return l.loop.Start(ctx)
}

func (l *listeningLoop) Stop() {
	if l.cancel != nil {
		l.cancel()
	}
	l.loop.Stop()
}

// nopLoop is a loop that does nothing.
type nopLoop struct{}

func (nopLoop) Start(context.Context) error { return nil }
func (nopLoop) Stop()                       {}

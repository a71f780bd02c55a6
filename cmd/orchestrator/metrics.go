package main

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/leader"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/pools"
	"github.com/gpuorch/orchestrator/reclaimer"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/webhooks"
)

// registerMetrics registers on reg the metrics each package defines for what it does: the
// engine's job metrics jm (its Observer) and the scrape-time collectors over the process's
// store, streams client, lease manager and elector. The reclaimer's metrics are registered
// where they are built (startCore); the API and admission control register theirs on the
// registry they are given. metrics/metricstest registers the same set for the tests.
func registerMetrics(reg *metrics.Registry, cfg *config.Config, st store.Store, sc *streams.Client,
	lm *leases.Manager, el leader.Elector, jm *engine.Metrics) error {
	cs := []prometheus.Collector{
		jm,
		engine.NewDLQDepthCollector(reg, sc),
		reclaimer.NewQueueCollector(reg, sc, cfg, st),
		pools.NewCollector(reg, st),
		leader.NewCollector(el),
		webhooks.NewCollector(reg, st),
	}
	// Both drivers count leases; st is the store itself, not the engine's wrapped one.
	if sr, ok := st.(store.StatsReader); ok {
		cs = append(cs, leases.NewCollector(reg, sr, lm, leases.DefaultRequirementMB(cfg)))
	}
	var errs []error
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}

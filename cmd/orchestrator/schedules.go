package main

import (
	"fmt"
	"log/slog"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/schedules"
	"github.com/gpuorch/orchestrator/store"
)

// schedulesLoop is the schedules' extra loop of leaderWork: the firer of one term, fenced by
// it, counting on the process's schedule metrics (registered on om). With schedules.disabled
// nothing fires.
func schedulesLoop(cfg *config.Config, st store.Store, eng *engine.Engine, om *metrics.Registry,
	log *slog.Logger) (func(term int64, fence engine.Fence) loop, error) {
	m := schedules.NewMetrics()
	if err := om.Register(m); err != nil {
		return nil, fmt.Errorf("register schedule metrics: %w", err)
	}
	return func(_ int64, fence engine.Fence) loop {
		if cfg.Schedules.Disabled {
			return nopLoop{}
		}
		return schedules.NewFirer(st, eng, schedules.FirerConfigFrom(cfg, schedules.FirerConfig{
			Fence: fence, Metrics: m, Stagger: true, Logger: log,
		}))
	}, nil
}

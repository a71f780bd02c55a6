package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/tracing"
	"github.com/gpuorch/orchestrator/worker"
)

// traceFlushTimeout bounds the export of the last spans at exit.
const traceFlushTimeout = 5 * time.Second

// observe starts what makes the worker observable: its metrics endpoint on worker.metrics_addr
// ("0": none; a port already taken is logged, not fatal) and the export of its traces when
// OTEL_EXPORTER_OTLP_ENDPOINT is set. The function it returns, called once the worker has
// drained, stops the endpoint and flushes the traces.
func observe(ctx context.Context, cfg *config.Config, types []*config.JobType, log *slog.Logger) (*worker.Metrics, func(), error) {
	names := make([]string, 0, len(types))
	for _, t := range types {
		names = append(names, t.Name)
	}
	m := worker.NewMetrics(names)
	// The endpoint outlives ctx (the first signal): the drain that follows is worth watching.
	mctx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	if addr := cfg.Worker.MetricsAddr; addr != "0" {
		// A taken port (several workers on one host with the default address) must not keep a
		// worker from running jobs: it runs without the endpoint, with a warning.
		if at, err := worker.ServeMetrics(mctx, addr, m.Handler(), log); err != nil {
			log.Warn("metrics endpoint disabled; set worker.metrics_addr (ORCH_WORKER_METRICS_ADDR) to a free port or 0",
				"component", "worker", "error", err)
		} else {
			log.Info("serving metrics", "component", "worker", "metrics_addr", at)
		}
	}
	shutdown, err := tracing.Setup(ctx, "gpu-orchestrator-worker", os.Getenv, log)
	if err != nil {
		stopServing()
		return nil, nil, fmt.Errorf("start worker: %w", err)
	}
	return m, func() {
		stopServing()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceFlushTimeout)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flush traces", "component", "worker", "error", err)
		}
	}, nil
}

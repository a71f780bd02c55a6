package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/gpuorch/orchestrator/tracing"
)

// traceFlushTimeout bounds the export of the last spans at shutdown.
const traceFlushTimeout = 5 * time.Second

// startTracing exports the orchestrator's spans over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is
// set (package tracing); the function it returns flushes them at shutdown.
func startTracing(ctx context.Context, log *slog.Logger) (stop func(), err error) {
	shutdown, err := tracing.Setup(ctx, "gpu-orchestrator", os.Getenv, log)
	if err != nil {
		return nil, fmt.Errorf("start orchestrator: %w", err)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceFlushTimeout)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flush traces", "component", "tracing", "error", err)
		}
	}, nil
}

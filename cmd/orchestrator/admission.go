package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/gpuorch/orchestrator/admission"
	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/store"
)

// startAdmission builds this instance's admission controller and starts its refresher: every
// instance runs one (leader or not), reading the shared policies, GPU telemetry and backlogs
// and sharing the token buckets in Redis. The returned stop is idempotent.
// Its metrics are registered on reg, the registry GET /metrics serves.
func startAdmission(ctx context.Context, cfg *config.Config, st store.Store, rdb redis.UniversalClient,
	reg prometheus.Registerer, log *slog.Logger) (*admission.Controller, func(), error) {
	ctl, err := admission.New(st, rdb, cfg, admission.Options{Prefix: cfg.RedisPrefix, Registerer: reg, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("start admission control: %w", err)
	}
	if err := ctl.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("start admission control: %w", err)
	}
	a := cfg.Admission
	if a.Disabled {
		log.Warn("admission control is disabled (admission.disabled): every submit and lease request is admitted")
	} else {
		log.Info("admission control on", "default_rate_per_sec", a.DefaultPolicy.RatePerSec,
			"default_burst", a.DefaultPolicy.Burst, "default_max_pending", a.DefaultPolicy.MaxPending,
			"gpu_high_watermark_pct", a.GPUHighWatermarkPct, "gpu_low_watermark_pct", a.GPULowWatermarkPct,
			"gpu_hold", a.GPUHold, "limiter_down_gpu", a.LimiterDownGPU, "limiter_down_cpu", a.LimiterDownCPU)
	}
	return ctl, ctl.Stop, nil
}

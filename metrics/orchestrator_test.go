package metrics_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/metrics/metricstest"
)

func TestOrchestratorExportsEveryRequiredFamily(t *testing.T) {
	t.Parallel()
	b := metricstest.New(t)
	b.Populate(t)
	names := b.Names(t)
	for _, name := range metricstest.Required {
		require.True(t, names[name], "%s is exported", name)
	}
	for _, name := range []string{"gpu_orchestrator_workers", "gpu_orchestrator_worker_pool_desired_workers",
		"gpu_orchestrator_gpu_telemetry_age_seconds", "gpu_orchestrator_collector_errors_total", "go_goroutines",
		"gpu_orchestrator_scheduler_placements_total", "gpu_orchestrator_scheduler_waiting_jobs",
		"gpu_orchestrator_scheduler_failed_passes_total", "gpu_orchestrator_schedule_skips_total",
		"gpu_orchestrator_schedule_fire_lag_seconds", "gpu_orchestrator_schedule_failed_passes_total",
		"gpu_orchestrator_webhook_attempts_total",
		"gpu_orchestrator_webhook_deliveries_total", "gpu_orchestrator_webhook_endpoints",
		"gpu_orchestrator_webhook_pending_deliveries", "gpu_orchestrator_webhook_pre_run_total"} {
		require.True(t, names[name], "%s is exported", name)
	}
	fams := metricstest.Gather(t, b.Metrics)
	require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_scheduler_waiting_jobs", map[string]string{"reason": "no_capacity"}),
		"the leader's pass found no GPU job waiting")
	require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_scheduler_placements_total", map[string]string{"type": "noop"}),
		"every type's series is pre-created")
}

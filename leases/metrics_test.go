package leases_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/metrics/metricstest"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/telemetry"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("LeasesAndGPUs", func(t *testing.T) {
		t.Parallel()
		cfg, err := config.Load("", func(string) string { return "" })
		require.NoError(t, err)
		cfg.JobTypes["inference"].GPUMemoryMB = 8000
		require.EqualValues(t, 8000, leases.DefaultRequirementMB(cfg))
		b := setup(t)
		reg := metrics.NewRegistry(slog.New(slog.DiscardHandler))
		reg.MustRegister(leases.NewCollector(reg, b.st.(store.StatsReader), b.m, leases.DefaultRequirementMB(cfg)))
		require.NoError(t, b.m.RecordSnapshot(ctx, telemetry.Snapshot{NodeID: "n1", Source: telemetry.SourceSimulated, GPUs: []telemetry.GPU{
			{Index: 0, UUID: "GPU-0", MemoryTotalMB: 24576, MemoryUsedMB: 1000, UtilizationPct: 40},
			{Index: 1, UUID: "GPU-1", MemoryTotalMB: 24576, MemoryUsedMB: 23000, UtilizationPct: telemetry.Unknown},
		}}))
		_, err = b.m.Grant(ctx, leases.GrantParams{Agent: "a", NodeID: "n1", Mode: store.LeaseGPU, MemoryMB: 8000, Actor: "agent:a"})
		require.NoError(t, err)
		_, err = b.m.Grant(ctx, leases.GrantParams{Agent: "a", NodeID: "n1", Mode: store.LeaseCPU, Actor: "agent:a"})
		require.NoError(t, err)

		fams := metricstest.Gather(t, reg)
		require.Equal(t, 1.0, metricstest.Value(t, fams, "gpu_orchestrator_leases_active", map[string]string{"mode": "gpu"}))
		require.Equal(t, 1.0, metricstest.Value(t, fams, "gpu_orchestrator_leases_active", map[string]string{"mode": "cpu"}))
		require.Equal(t, 1.0, metricstest.Value(t, fams, "gpu_orchestrator_leases_free", nil), "GPU 0 still has room for 8000 MB; GPU 1 has not")
		gpu0 := map[string]string{"node_id": "n1", "gpu_index": "0"}
		require.InDelta(t, 100*1000.0/24576, metricstest.Value(t, fams, "gpu_orchestrator_gpu_mem_used_pct", gpu0), 1e-9)
		require.Equal(t, 40.0, metricstest.Value(t, fams, "gpu_orchestrator_gpu_utilization_pct", gpu0))
		require.Len(t, fams["gpu_orchestrator_gpu_utilization_pct"].GetMetric(), 1, "an unknown utilization is left out")
		age := metricstest.Value(t, fams, "gpu_orchestrator_gpu_telemetry_age_seconds", map[string]string{"node_id": "n1", "gpu_index": "1"})
		require.GreaterOrEqual(t, age, 0.0)
		require.Less(t, age, 60.0)
	})

	t.Run("TheTwoReadsFailApart", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := metrics.NewRegistry(slog.New(slog.DiscardHandler))
		reg.MustRegister(leases.NewCollector(reg, downCounter{}, b.m, 1))
		fams := metricstest.GatherFailing(t, reg)
		require.NotContains(t, fams, "gpu_orchestrator_leases_active")
		require.Contains(t, fams, "gpu_orchestrator_leases_free", "the GPU list was read")
		require.GreaterOrEqual(t, metricstest.ScrapeErrors(t, reg, "leases"), 1.0, "the failed read is counted")
		require.Zero(t, metricstest.ScrapeErrors(t, reg, "gpus"))
	})
}

type downCounter struct{}

func (downCounter) LeaseCountActive(context.Context) (map[store.LeaseMode]int64, error) {
	return nil, errors.New("database is down")
}

package pools_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/metrics/metricstest"
	"github.com/gpuorch/orchestrator/pools"
	"github.com/gpuorch/orchestrator/store"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testenv.MySQLStore(t)
	reg := metrics.NewRegistry(slog.New(slog.DiscardHandler))
	reg.MustRegister(pools.NewCollector(reg, st))
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, p := range []store.Pool{
		{ID: "p-run", Agent: "a", Types: []string{"noop"}, DesiredWorkers: 3, Status: store.PoolRunning},
		{ID: "p-stop", Agent: "a", Types: []string{"noop"}, DesiredWorkers: 1, Status: store.PoolStopped},
		{ID: "p-drain", Agent: "a", Types: []string{"noop"}, DesiredWorkers: 2, Status: store.PoolDraining},
	} {
		p.CreatedAt, p.UpdatedAt, p.StartedAt, p.StatusChangedAt = now, now, now, now
		require.NoError(t, st.PoolInsert(ctx, p))
	}
	for _, w := range []store.Worker{
		{ID: "w1", PoolID: "p-run", Status: store.WorkerIdle},
		{ID: "w2", PoolID: "p-run", Status: store.WorkerExecuting},
		{ID: "w3", PoolID: "p-run", Status: store.WorkerOffline},
	} {
		w.NodeID, w.Types, w.Concurrency, w.RegisteredAt, w.LastHeartbeat = "n1", []string{"noop"}, 1, now, now
		require.NoError(t, st.WorkerUpsert(ctx, w))
	}

	fams := metricstest.Gather(t, reg)
	for status, want := range map[string]float64{"starting": 0, "running": 1, "draining": 1, "stopped": 1, "evicted": 0} {
		require.Equal(t, want, metricstest.Value(t, fams, "gpu_orchestrator_worker_pools_total", map[string]string{"status": status}), status)
	}
	for status, want := range map[string]float64{"idle": 1, "executing": 1, "draining": 0, "offline": 1} {
		require.Equal(t, want, metricstest.Value(t, fams, "gpu_orchestrator_workers", map[string]string{"status": status}), status)
	}
	require.Equal(t, 2.0, metricstest.Value(t, fams, "gpu_orchestrator_worker_pool_workers", map[string]string{"pool_id": "p-run"}))
	require.Equal(t, 3.0, metricstest.Value(t, fams, "gpu_orchestrator_worker_pool_desired_workers", map[string]string{"pool_id": "p-run"}))
	require.Equal(t, 2.0, metricstest.Value(t, fams, "gpu_orchestrator_worker_pool_desired_workers", map[string]string{"pool_id": "p-drain"}))
	require.Len(t, fams["gpu_orchestrator_worker_pool_workers"].GetMetric(), 2, "a stopped pool has no series")
	// The target is what KEDA scales a pool's Deployment to: desired while live, 0 once the
	// pool drains or stopped, and a series for every pool.
	for pool, want := range map[string]float64{"p-run": 3, "p-drain": 0, "p-stop": 0} {
		require.Equal(t, want, metricstest.Value(t, fams, "gpu_orchestrator_worker_pool_target_workers", map[string]string{"pool_id": pool}), pool)
	}
	require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_collector_errors_total", map[string]string{"collector": "pools"}))
}

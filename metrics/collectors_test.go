package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
	"github.com/gpuorch/orchestrator/telemetry"
)

func TestQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("LagAndPendingPerStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		group := streams.GroupName("noop")
		require.NoError(t, b.sc.EnsureGroup(ctx, "noop", group))
		for range 5 {
			b.submit(t, "noop")
		}
		ds, err := b.sc.Read(ctx, streams.ReadParams{Group: group, Consumer: "w1", Streams: []string{"noop"}, Count: 2, Block: time.Millisecond})
		require.NoError(t, err)
		require.Len(t, ds, 2)

		fams := gather(t, b.om)
		require.Equal(t, 3.0, value(t, fams, "gpu_orchestrator_job_queue_depth", map[string]string{"stream": "noop"}), "undelivered")
		require.Equal(t, 2.0, value(t, fams, "gpu_orchestrator_job_pending_entries", map[string]string{"stream": "noop"}), "delivered, not acked")
		for _, s := range []string{"inference_jobs", "preloads", "ingest_events"} {
			require.Zero(t, value(t, fams, "gpu_orchestrator_job_queue_depth", map[string]string{"stream": s}), "no stream yet: 0")
		}
	})

	t.Run("LagUnknownToRedisIsCounted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		group := streams.GroupName("noop")
		require.NoError(t, b.sc.EnsureGroup(ctx, "noop", group))
		var jobs []store.Job
		for range 4 {
			jobs = append(jobs, b.submit(t, "noop"))
		}
		_, err := b.sc.Read(ctx, streams.ReadParams{Group: group, Consumer: "w1", Streams: []string{"noop"}, Count: 1, Block: time.Millisecond})
		require.NoError(t, err)
		// Deleting an undelivered entry in the middle makes Redis report the lag as unknown.
		j, err := b.st.JobGet(ctx, jobs[2].ID)
		require.NoError(t, err)
		require.NoError(t, b.sc.Redis().XDel(ctx, b.sc.StreamKey("noop"), j.StreamID).Err())

		stats, err := b.sc.GroupStats(ctx, []streams.GroupRef{{Stream: "noop", Group: group}})
		require.NoError(t, err)
		require.Equal(t, []streams.GroupStat{{GroupRef: streams.GroupRef{Stream: "noop", Group: group}, Lag: 2, Pending: 1, Exists: true}}, stats)
	})

	t.Run("RedisDownFailsTheFamiliesOnly", func(t *testing.T) {
		t.Parallel()
		reg := metrics.NewRegistry(quiet)
		cfg, err := config.Load("", func(string) string { return "" })
		require.NoError(t, err)
		reg.MustRegister(metrics.NewQueues(reg, downStreams{}, metrics.GroupsOf(cfg)))
		_, err = reg.Gather()
		require.ErrorContains(t, err, "redis is down")
		all, err := reg.Gather()
		require.Error(t, err)
		fams := map[string]*dto.MetricFamily{}
		for _, f := range all {
			fams[f.GetName()] = f
		}
		require.GreaterOrEqual(t, value(t, fams, "gpu_orchestrator_collector_errors_total", map[string]string{"collector": "queues"}), 1.0)
		require.Contains(t, fams, "go_goroutines", "the other families are served")
	})
}

type downStreams struct{}

func (downStreams) GroupStats(context.Context, []streams.GroupRef) ([]streams.GroupStat, error) {
	return nil, errors.New("redis is down")
}

func TestGPUs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, func(c *config.Config) { c.JobTypes["inference"].GPUMemoryMB = 8000 })
	require.EqualValues(t, 8000, metrics.DefaultRequirementMB(b.cfg))
	lm := b.lm
	require.NoError(t, lm.RecordSnapshot(ctx, telemetry.Snapshot{NodeID: "n1", Source: telemetry.SourceSimulated, GPUs: []telemetry.GPU{
		{Index: 0, UUID: "GPU-0", MemoryTotalMB: 24576, MemoryUsedMB: 1000, UtilizationPct: 40},
		{Index: 1, UUID: "GPU-1", MemoryTotalMB: 24576, MemoryUsedMB: 23000, UtilizationPct: telemetry.Unknown},
	}}))
	_, err := lm.Grant(ctx, leases.GrantParams{Agent: "a", NodeID: "n1", Mode: store.LeaseGPU, MemoryMB: 8000, Actor: "agent:a"})
	require.NoError(t, err)
	_, err = lm.Grant(ctx, leases.GrantParams{Agent: "a", NodeID: "n1", Mode: store.LeaseCPU, Actor: "agent:a"})
	require.NoError(t, err)

	fams := gather(t, b.om)
	require.Equal(t, 1.0, value(t, fams, "gpu_orchestrator_leases_active", map[string]string{"mode": "gpu"}))
	require.Equal(t, 1.0, value(t, fams, "gpu_orchestrator_leases_active", map[string]string{"mode": "cpu"}))
	require.Equal(t, 1.0, value(t, fams, "gpu_orchestrator_leases_free", nil), "GPU 0 still has room for 8000 MB; GPU 1 has not")
	gpu0 := map[string]string{"node_id": "n1", "gpu_index": "0"}
	require.InDelta(t, 100*1000.0/24576, value(t, fams, "gpu_orchestrator_gpu_mem_used_pct", gpu0), 1e-9)
	require.Equal(t, 40.0, value(t, fams, "gpu_orchestrator_gpu_utilization_pct", gpu0))
	require.Len(t, fams["gpu_orchestrator_gpu_utilization_pct"].GetMetric(), 1, "an unknown utilization is left out")
	age := value(t, fams, "gpu_orchestrator_gpu_telemetry_age_seconds", map[string]string{"node_id": "n1", "gpu_index": "1"})
	require.GreaterOrEqual(t, age, 0.0)
	require.Less(t, age, 60.0)
}

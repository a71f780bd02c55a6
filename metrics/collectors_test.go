package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
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

package reclaimer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/metrics"
	"github.com/gpuorch/orchestrator/metrics/metricstest"
	"github.com/gpuorch/orchestrator/reclaimer"
	"github.com/gpuorch/orchestrator/streams"
)

func TestQueueCollector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)

	t.Run("LagAndPendingPerStream", func(t *testing.T) {
		t.Parallel()
		rdb := streams.NewRedis(testenv.RedisAddr(t), "")
		t.Cleanup(func() { _ = rdb.Close() })
		sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
		reg := metrics.NewRegistry(quiet)
		reg.MustRegister(reclaimer.NewQueueCollector(reg, sc, reclaimer.GroupsOf(cfg)))
		group := streams.GroupName("noop")
		require.NoError(t, sc.EnsureGroup(ctx, "noop", group))
		msgs := make([]streams.Message, 5)
		for i := range msgs {
			msgs[i] = streams.Message{Stream: "noop", JobID: fmt.Sprintf("job-%d", i), Type: "noop"}
		}
		_, err := sc.Publish(ctx, msgs)
		require.NoError(t, err)
		ds, err := sc.Read(ctx, streams.ReadParams{Group: group, Consumer: "w1", Streams: []string{"noop"}, Count: 2, Block: time.Millisecond})
		require.NoError(t, err)
		require.Len(t, ds, 2)

		fams := metricstest.Gather(t, reg)
		require.Equal(t, 3.0, metricstest.Value(t, fams, "gpu_orchestrator_job_queue_depth", map[string]string{"stream": "noop"}), "undelivered")
		require.Equal(t, 2.0, metricstest.Value(t, fams, "gpu_orchestrator_job_pending_entries", map[string]string{"stream": "noop"}), "delivered, not acked")
		for _, s := range []string{"inference_jobs", "preloads", "ingest_events"} {
			require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_job_queue_depth", map[string]string{"stream": s}), "no stream yet: 0")
		}
	})

	t.Run("RedisDownFailsTheFamiliesOnly", func(t *testing.T) {
		t.Parallel()
		reg := metrics.NewRegistry(quiet)
		reg.MustRegister(reclaimer.NewQueueCollector(reg, downStreams{}, reclaimer.GroupsOf(cfg)))
		_, err := reg.Gather()
		require.ErrorContains(t, err, "redis is down")
		fams := metricstest.GatherFailing(t, reg)
		require.NotContains(t, fams, "gpu_orchestrator_job_queue_depth")
		require.GreaterOrEqual(t, metricstest.ScrapeErrors(t, reg, "queues"), 2.0, "both failed reads are counted")
		require.Contains(t, fams, "go_goroutines", "the other families are served")
	})
}

type downStreams struct{}

func (downStreams) GroupStats(context.Context, []reclaimer.Group) ([]streams.GroupStat, error) {
	return nil, errors.New("redis is down")
}

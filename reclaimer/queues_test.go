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
		reg.MustRegister(reclaimer.NewQueueCollector(reg, sc, cfg, nil))
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

	t.Run("NodeStreamsAndUnplacedJobsCountAsTheType", func(t *testing.T) {
		t.Parallel()
		rdb := streams.NewRedis(testenv.RedisAddr(t), "")
		t.Cleanup(func() { _ = rdb.Close() })
		sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
		reg := metrics.NewRegistry(quiet)
		reg.MustRegister(reclaimer.NewQueueCollector(reg, sc, cfg, unplaced{"inference": 4}))
		node := streams.NodeStream("inference_jobs", "node-1")
		_, err := sc.Publish(ctx, []streams.Message{{Stream: node, JobID: "placed-1", Type: "inference"},
			{Stream: node, JobID: "placed-2", Type: "inference"}})
		require.NoError(t, err)

		fams := metricstest.Gather(t, reg)
		require.Equal(t, 6.0, metricstest.Value(t, fams, "gpu_orchestrator_job_queue_depth", map[string]string{"stream": "inference_jobs"}),
			"4 waiting for the scheduler and 2 placed on node-1, not yet read")
		require.Zero(t, metricstest.Value(t, fams, "gpu_orchestrator_job_queue_depth", map[string]string{"stream": "preloads"}))
	})

	t.Run("RedisDownFailsTheFamiliesOnly", func(t *testing.T) {
		t.Parallel()
		reg := metrics.NewRegistry(quiet)
		reg.MustRegister(reclaimer.NewQueueCollector(reg, downStreams{}, cfg, nil))
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

func (downStreams) NodeStreams(context.Context) ([]string, error) {
	return nil, errors.New("redis is down")
}

// unplaced counts GPU jobs waiting for the scheduler, by type.
type unplaced map[string]int

func (u unplaced) JobCountUnplaced(context.Context) (map[string]int, error) { return u, nil }

package admission

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/streams"
)

// closedRedis is a client of a loopback address where nothing listens: Redis is down.
func closedRedis(t *testing.T) redis.UniversalClient {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestLimiterDown(t *testing.T) {
	t.Parallel()
	st := testenv.MySQLStore(t)

	t.Run("DefaultsFailClosedForGPU", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, st, closedRedis(t), "down:", loadConfig(t, ""))
		require.NoError(t, b.c.Ready())

		d := b.job(t, "a", "gpu")
		requireRejected(t, d, ReasonLimiterDown)
		require.Equal(t, RetryAfterLimiterDown, d.RetryAfter)
		require.Contains(t, d.Message, "limiter_down_gpu")
		requireRejected(t, b.lease(t, "a", true), ReasonLimiterDown)
		requireAdmitted(t, b.job(t, "a", "noop"), ReasonLimiterDown)
		requireAdmitted(t, b.lease(t, "a", false), ReasonLimiterDown)

		var nr *NotReadyError
		require.ErrorAs(t, b.c.Ready(), &nr)
		require.Contains(t, nr.Reason, "GPU work fails closed, CPU work fails open")
		st := b.c.Status().Limiter
		require.False(t, st.Up)
		require.False(t, st.DownSince.IsZero())
		require.Error(t, st.Err)
		require.Equal(t, 2.0, b.decisions("*", DecisionRejected, ReasonLimiterDown))
		require.Equal(t, 2.0, b.decisions("*", DecisionAdmitted, ReasonLimiterDown))
	})

	t.Run("Configurable", func(t *testing.T) {
		t.Parallel()
		cfg := loadConfig(t, "admission: {limiter_down_gpu: open, limiter_down_cpu: closed}\n")
		b := newBundle(t, st, closedRedis(t), "down2:", cfg)
		requireAdmitted(t, b.job(t, "a", "gpu"), ReasonLimiterDown)
		requireRejected(t, b.job(t, "a", "noop"), ReasonLimiterDown)
		// A job routed to its CPU fallback is judged as CPU work.
		b.c.queues.inflight["infer"] = map[string]int{"x": 1, "y": 1}
		requireRejected(t, b.job(t, "a", "infer"), ReasonLimiterDown)
		require.Len(t, b.c.queues.inflight["infer"], 2)
		require.Empty(t, b.c.queues.inflight["infer_cpu"], "the refused job's place in the fallback is given back")
	})

	t.Run("RefreshFollowsRedis", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, st, closedRedis(t), "down3:", loadConfig(t, ""))
		_, err := b.c.refresher.runOnce(t.Context())
		require.NoError(t, err, "the ping's failure is the limiter's state, not the pass's error")
		require.Error(t, b.c.Ready(), "the refresh pings Redis: /readyz knows before any request")
	})
}

func TestLimiterRecovers(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.c.limiter.observe(errors.New("connection refused"))
	require.Error(t, b.c.Ready())
	since := b.c.limiter.State().DownSince
	b.c.limiter.observe(errors.New("still refused"))
	require.Equal(t, since, b.c.limiter.State().DownSince, "down since the first failure")
	b.refresh(t)
	require.NoError(t, b.c.Ready())
	require.True(t, b.c.limiter.State().Up)
	require.True(t, b.c.limiter.State().DownSince.IsZero())
	requireAdmitted(t, b.job(t, "a", "gpu"), ReasonOK)
}

func TestLimiterTimeout(t *testing.T) {
	t.Parallel()
	// A Redis that accepts connections but never answers costs a submit limiter_timeout.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns := make(chan net.Conn, 16)
	t.Cleanup(func() {
		_ = l.Close()
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case conns <- c:
			default:
				_ = c.Close()
			}
		}
	}()
	rdb := streams.NewRedis(l.Addr().String(), "")
	t.Cleanup(func() { _ = rdb.Close() })
	b := newBundle(t, testenv.MySQLStore(t), rdb, "stalled:", loadConfig(t, "admission: {limiter_timeout: 50ms}\n"))
	start := time.Now()
	requireAdmitted(t, b.job(t, "a", "noop"), ReasonLimiterDown)
	require.Less(t, time.Since(start), 2*time.Second)

	// Down now: later requests do not wait for Redis at all.
	pol, _ := b.c.policies.lookup("a")
	_, _, err = b.c.limiter.Allow(t.Context(), "a", pol)
	require.ErrorIs(t, err, ErrLimiterDown)
	requireAdmitted(t, b.job(t, "a", "noop"), ReasonLimiterDown)
}

package admission

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/streams"
)

func TestBatchSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rate  float64
		burst int
		want  int
	}{
		{20, 20, 1},       // slow agents are never batched
		{5000, 10000, 50}, // 10 ms of the rate
		{5000, 100, 10},   // at most a tenth of the burst
		{1e6, 10_000_000, 10000},
		{0.5, 1, 1},
	} {
		require.Equal(t, tc.want, batchSize(store.AdmissionPolicy{RatePerSec: tc.rate, Burst: tc.burst}), "%+v", tc)
	}
}

func TestTokenStash(t *testing.T) {
	t.Parallel()
	s := newTokenStash()
	now := t0

	require.Equal(t, 1, s.take("slow", 1, now), "a batch of 1 always asks Redis")

	require.Equal(t, 10, s.take("k", 10, now))
	require.Equal(t, 1, s.take("k", 10, now), "one batch call at a time; the others ask for one")
	s.put("k", 10, 10, now)
	for range 9 {
		require.Zero(t, s.take("k", 10, now), "handed out from the stash")
	}
	require.Equal(t, 10, s.take("k", 10, now), "stash empty: the next batch")
	s.put("k", 10, 10, now)
	require.Equal(t, 10, s.take("k", 10, now.Add(stashTTL)), "tokens older than the TTL are dropped")

	// The bucket could not give a batch: single calls for a while, exact near the limit.
	s.put("k", 10, 1, now)
	require.Equal(t, 1, s.take("k", 10, now.Add(stashTTL/2)))
	require.Equal(t, 10, s.take("k", 10, now.Add(stashTTL)))
	s.put("k", 10, 0, now.Add(stashTTL)) // an error, or nothing at all

	s.sweep(now.Add(time.Hour))
	require.Empty(t, s.keys)
}

// countingHook counts the scripts run on a Redis client.
type countingHook struct{ scripts atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := strings.ToLower(cmd.Name()); name == "evalsha" || name == "eval" {
			h.scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestLimiterBatches(t *testing.T) {
	t.Parallel()
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &countingHook{}
	rdb.AddHook(hook)
	prefix := testenv.RedisPrefix(t)
	ctx := t.Context()

	t.Run("FastAgentFewCalls", func(t *testing.T) {
		l := NewLimiter(rdb, prefix, 5*time.Second, discardLog())
		p := store.AdmissionPolicy{RatePerSec: 1e4, Burst: 20000, Enabled: true} // batches of 100
		before := hook.scripts.Load()
		for range 1000 {
			ok, _, err := l.Allow(ctx, "fast", p)
			require.NoError(t, err)
			require.True(t, ok)
		}
		require.LessOrEqual(t, hook.scripts.Load()-before, int64(15), "about one call per 100 decisions")
	})

	t.Run("ExactNearTheLimit", func(t *testing.T) {
		// Two instances drain one bucket of 500 at 5000/s in batches of 50: the bucket is
		// never overdrawn, and the agent gets (nearly) all it is owed.
		a := NewLimiter(rdb, prefix, 5*time.Second, discardLog())
		b := NewLimiter(rdb, prefix, 5*time.Second, discardLog())
		p := store.AdmissionPolicy{RatePerSec: 5000, Burst: 500, Enabled: true}
		var admitted int
		var lastRetry time.Duration
		start := time.Now()
		for i := range 3000 {
			l := a
			if i%2 == 1 {
				l = b
			}
			ok, retry, err := l.Allow(ctx, "drained", p)
			require.NoError(t, err)
			if ok {
				admitted++
			} else {
				lastRetry = retry
			}
		}
		owed := float64(p.Burst) + p.RatePerSec*time.Since(start).Seconds()
		t.Logf("admitted %d of %.0f owed", admitted, owed)
		require.LessOrEqual(t, float64(admitted), owed+1, "never more than the bucket gives")
		require.GreaterOrEqual(t, float64(admitted), min(3000, 0.9*owed)-2*float64(batchSize(p)))
		// A loop slower than the bucket refills is owed every call (the first check then holds
		// it to that); a faster one was refused, with a retry of the next token.
		if admitted < 3000 {
			require.Positive(t, lastRetry)
			require.LessOrEqual(t, lastRetry, time.Millisecond, "a token every 0.2 ms")
		}
	})
}

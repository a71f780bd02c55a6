package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
)

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	b := config.Backoff{Initial: time.Second, Multiplier: 2, Max: 5 * time.Minute, Jitter: 0.2}
	mid := func() float64 { return 0.5 } // no jitter
	t.Run("Exponential", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, time.Second, RetryDelay(b, 1, mid))
		require.Equal(t, 2*time.Second, RetryDelay(b, 2, mid))
		require.Equal(t, 8*time.Second, RetryDelay(b, 4, mid))
	})
	t.Run("Capped", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 5*time.Minute, RetryDelay(b, 20, mid))
		require.Equal(t, 5*time.Minute, RetryDelay(b, 5000, mid))
	})
	t.Run("JitterBounds", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 800*time.Millisecond, RetryDelay(b, 1, func() float64 { return 0 }))
		require.InDelta(t, float64(1200*time.Millisecond), float64(RetryDelay(b, 1, func() float64 { return 0.9999999 })), float64(time.Millisecond))
		for attempt := 1; attempt < 30; attempt++ {
			for range 50 {
				d := RetryDelay(b, attempt, nil)
				require.GreaterOrEqual(t, d, time.Duration(0))
				require.LessOrEqual(t, d, time.Duration(float64(b.Max)*1.2))
			}
		}
	})
	t.Run("JitterSpreads", func(t *testing.T) {
		t.Parallel()
		seen := map[time.Duration]bool{}
		for range 20 {
			seen[RetryDelay(b, 3, nil)] = true
		}
		require.Greater(t, len(seen), 1, "jitter must spread retries")
	})
}

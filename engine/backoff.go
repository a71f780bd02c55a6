package engine

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/gpuorch/orchestrator/config"
)

// RetryDelay is the delay before attempt+1 after attempt failed (attempt counts from 1):
// initial × multiplier^(attempt-1), capped at max, then spread by ± jitter. rnd returns a value
// in [0, 1); nil means math/rand. The result is never negative and never above max×(1+jitter).
func RetryDelay(b config.Backoff, attempt int, rnd func() float64) time.Duration {
	if rnd == nil {
		rnd = rand.Float64
	}
	if attempt < 1 {
		attempt = 1
	}
	d := float64(b.Initial) * math.Pow(b.Multiplier, float64(attempt-1))
	if d > float64(b.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		d = float64(b.Max)
	}
	d += (rnd()*2 - 1) * b.Jitter * d
	if d < 0 {
		d = 0
	}
	return time.Duration(d)
}

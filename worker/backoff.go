package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/client"
)

// backoff returns the delay before retry number try (0-based): min·2^try capped at max, with
// "equal jitter" (between half and all of it) so many workers do not retry in lockstep.
func backoff(try int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 0; i < try && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + jitter(d/2)
}

// jitter returns a random duration in [0, d].
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// sleepCtx waits d or until ctx ends, whichever comes first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retry calls call until it succeeds, ctx ends, or permanent (when not nil) says the error will
// not go away; it returns the last error in the last two cases. It waits a capped exponential
// backoff with jitter between calls, at least the server's Retry-After.
func (w *Worker) retry(ctx context.Context, what string, permanent func(error) bool, call func(context.Context) error) error {
	for try := 0; ; try++ {
		err := call(ctx)
		if err == nil {
			if try > 0 {
				w.log.Info(what+" succeeded after retries", "tries", try+1)
			}
			return nil
		}
		if ctx.Err() != nil || (permanent != nil && permanent(err)) {
			return err
		}
		d := backoff(try, w.cfg.RetryMin, w.cfg.RetryMax)
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.RetryAfter > d {
			d = min(apiErr.RetryAfter, w.cfg.RetryMax)
		}
		w.log.Warn(what+" failed; retrying", "error", err, "tries", try+1, "retry_in", d.String())
		if sleepCtx(ctx, d) != nil {
			return err
		}
	}
}

// isPermanentAPIError reports a 4xx answer that repeating the same request will not change.
func isPermanentAPIError(err error) bool {
	var apiErr *client.APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode >= 400 && apiErr.StatusCode < 500 && !apiErr.Temporary()
}

// slots is the semaphore of the worker's concurrency: a reader takes one slot per entry before
// it reads, and the slot comes back when the entry is acknowledged or given up.
type slots struct {
	ch chan struct{}
}

func newSlots(n int) *slots { return &slots{ch: make(chan struct{}, n)} }

// acquire takes between 1 and n slots, waiting only for the first one.
func (s *slots) acquire(ctx context.Context, n int) (int, error) {
	select {
	case s.ch <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	got := 1
	for got < n {
		select {
		case s.ch <- struct{}{}:
			got++
		default:
			return got, nil
		}
	}
	return got, nil
}

// tryAcquire takes up to n slots without waiting and returns how many it took.
func (s *slots) tryAcquire(n int) int {
	got := 0
	for got < n {
		select {
		case s.ch <- struct{}{}:
			got++
		default:
			return got
		}
	}
	return got
}

// release gives n slots back.
func (s *slots) release(n int) {
	for range n {
		<-s.ch
	}
}

// inUse is the number of slots taken.
func (s *slots) inUse() int { return len(s.ch) }

// waitGroup is a sync.WaitGroup whose wait can give up.
type waitGroup struct{ sync.WaitGroup }

// waitFor waits up to d; false when the group was not done by then.
func (g *waitGroup) waitFor(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		g.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

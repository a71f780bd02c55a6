// Package txretry reruns the work that a transient lock conflict rolled back (a MariaDB
// deadlock or lock wait timeout, SQLite busy or locked), after a short jittered backoff: what
// both drivers of store.Store do for WithTx, and MariaDB's for single statements too.
package txretry

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// BackoffBase is the wait before the first rerun; it doubles per rerun and is jittered, so
// that the two parties of a deadlock do not collide again.
const BackoffBase = 5 * time.Millisecond

// Do runs do, and again while it fails with an error that retryable reports, up to retries
// reruns, each after Backoff. It returns the last result; when ctx ends during a backoff, the
// error is the last one joined with the context's.
func Do[T any](ctx context.Context, retries int, retryable func(error) bool, do func() (T, error)) (T, error) {
	for retry := 0; ; retry++ {
		v, err := do()
		if err == nil || !retryable(err) || retry >= retries {
			return v, err
		}
		if err := Backoff(ctx, retry, err); err != nil {
			var zero T
			return zero, err
		}
	}
}

// Run is Do for work that returns only an error, such as a whole transaction.
func Run(ctx context.Context, retries int, retryable func(error) bool, run func() error) error {
	_, err := Do(ctx, retries, retryable, func() (struct{}, error) { return struct{}{}, run() })
	return err
}

// Backoff waits before rerun retry+1 of what err rolled back: BackoffBase doubled per retry,
// jittered to [d, 2d). It returns err joined with the context's error when ctx ends first.
func Backoff(ctx context.Context, retry int, err error) error {
	d := BackoffBase << retry
	d += rand.N(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	case <-t.C:
		return nil
	}
}

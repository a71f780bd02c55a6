// Package txretry reruns the work that a transient lock conflict rolled back (a MariaDB
// deadlock or lock wait timeout, SQLite busy or locked), after a short jittered backoff: the
// WithTx of both drivers of store.Store (Transactions), and MariaDB's single statements.
package txretry

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// BackoffBase is the wait before the first rerun; it doubles per rerun and is jittered, so
// that the two parties of a deadlock do not collide again.
const BackoffBase = 5 * time.Millisecond

// Policy is when a driver reruns: after the errors Retryable reports, up to Retries times.
type Policy struct {
	Retries   int
	Retryable func(error) bool
}

// Do runs do, and again while it fails with an error that p.Retryable reports, up to
// p.Retries reruns, each after Backoff. It returns the last result; when ctx ends during a
// backoff, the error is the last one joined with the context's.
func Do[T any](ctx context.Context, p Policy, do func() (T, error)) (T, error) {
	for retry := 0; ; retry++ {
		v, err := do()
		if err == nil || !p.Retryable(err) || retry >= p.Retries {
			return v, err
		}
		if err := Backoff(ctx, retry, err); err != nil {
			var zero T
			return zero, err
		}
	}
}

// Run is Do for work that returns only an error, such as a whole transaction.
func (p Policy) Run(ctx context.Context, run func() error) error {
	_, err := Do(ctx, p, func() (struct{}, error) { return struct{}{}, run() })
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

// Transactions is the WithTx of a driver's store.Store, which embeds it: tx runs fn in one
// transaction of the driver, committed when fn returns nil and rolled back otherwise, and
// final marks the error that comes out in the store's terms (store.ErrUnavailable).
type Transactions struct {
	policy Policy
	tx     func(ctx context.Context, fn func(store.Tx) error) error
	final  func(error) error
}

// NewTransactions is the Transactions of tx, rerun as p says, whose errors final marks.
func NewTransactions(p Policy, tx func(context.Context, func(store.Tx) error) error, final func(error) error) Transactions {
	return Transactions{policy: p, tx: tx, final: final}
}

// WithTx runs fn in one transaction, committing when fn returns nil and rolling back otherwise
// (store.Store). An error the Policy calls retryable, whether from fn's statements or from the
// commit, reruns fn from the start up to Policy.Retries times with a short jittered backoff,
// so fn must not have side effects outside the transaction. A panic in fn rolls back and
// propagates.
func (t Transactions) WithTx(ctx context.Context, fn func(store.Tx) error) error {
	return t.final(t.policy.Run(ctx, func() error { return t.tx(ctx, fn) }))
}

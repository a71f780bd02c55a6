package store

import (
	"context"
	"fmt"
)

// Fence guards a leader-only write: it runs first inside the write's transaction and fails it
// (ErrFenced) once this instance's leadership term is no longer current. The leader wiring
// passes func(ctx, tx) error { return tx.LeaderCheckTerm(ctx, term) }; nil means no fencing
// (tests, single-instance tools).
type Fence func(ctx context.Context, tx Tx) error

// TxRunner runs a function in one transaction (Store has it).
type TxRunner interface {
	WithTx(ctx context.Context, fn func(Tx) error) error
}

// WithFence runs fn in one transaction of db behind fence: the fence's check first, so that a
// deposed leader's write changes nothing.
func WithFence(ctx context.Context, db TxRunner, fence Fence, fn func(Tx) error) error {
	return db.WithTx(ctx, func(tx Tx) error {
		if fence != nil {
			if err := fence(ctx, tx); err != nil {
				return fmt.Errorf("check leadership: %w", err)
			}
		}
		return fn(tx)
	})
}

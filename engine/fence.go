package engine

import (
	"context"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
)

// Fence guards a leader-only write: it runs first inside the write's transaction and fails it
// (store.ErrFenced) when this instance's leadership term is no longer current. The leader
// wiring passes func(ctx, tx) error { return tx.LeaderCheckTerm(ctx, term) }; nil means no
// fencing (tests, single-instance tools).
type Fence func(ctx context.Context, tx store.Tx) error

// fenced runs fn in one transaction behind fence.
func (e *Engine) fenced(ctx context.Context, fence Fence, fn func(tx store.Tx) error) error {
	return e.store.WithTx(ctx, func(tx store.Tx) error {
		if fence != nil {
			if err := fence(ctx, tx); err != nil {
				return fmt.Errorf("check leadership: %w", err)
			}
		}
		return fn(tx)
	})
}

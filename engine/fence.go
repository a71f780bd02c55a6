package engine

import (
	"context"

	"github.com/gpuorch/orchestrator/store"
)

// Fence guards a leader-only write (store.Fence).
type Fence = store.Fence

// fenced runs fn in one transaction behind fence.
func (e *Engine) fenced(ctx context.Context, fence Fence, fn func(tx store.Tx) error) error {
	return store.WithFence(ctx, e.store, fence, fn)
}

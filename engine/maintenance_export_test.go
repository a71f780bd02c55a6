package engine

import "context"

// RunOnce exposes one pass of the retention cleaner to the tests of package engine_test.
func (r *RetentionCleaner) RunOnce(ctx context.Context) (RetentionResult, error) {
	return r.runOnce(ctx)
}

// RunOnce exposes one pass of the DLQ relay to the tests of package engine_test.
func (r *DLQRelay) RunOnce(ctx context.Context) (int, error) { return r.runOnce(ctx) }

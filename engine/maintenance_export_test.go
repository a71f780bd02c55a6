package engine

import "context"

// RunOnce exposes one pass of the retention cleaner to the tests of package engine_test.
func (r *RetentionCleaner) RunOnce(ctx context.Context) (RetentionResult, error) {
	return r.runOnce(ctx)
}

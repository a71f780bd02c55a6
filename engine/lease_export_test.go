package engine

import "context"

// PurgeOnce runs one pass of the purger (its runOnce), for the tests of package engine_test.
func PurgeOnce(ctx context.Context, p *LeasePurger) (PurgeResult, error) { return p.runOnce(ctx) }

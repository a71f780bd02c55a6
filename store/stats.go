package store

import "context"

// StatsReader is the read-only aggregates that metrics collectors read at scrape time. It is not
// part of Executor: nothing on the job path needs it, so only the process wiring asks a store
// for it (both drivers implement it), and test doubles of Store need not.
type StatsReader interface {
	// LeaseCountActive returns the number of active leases by mode (modes without one are
	// absent). It reads an index only (status, …), so it is cheap enough for every scrape.
	LeaseCountActive(ctx context.Context) (map[LeaseMode]int64, error)
}

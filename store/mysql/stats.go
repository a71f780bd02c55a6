package mysql

import (
	"context"

	"github.com/gpuorch/orchestrator/store"
)

var _ store.StatsReader = (*Store)(nil)

// LeaseCountActive implements store.StatsReader; it reads index idx_leases_status_expires only.
func (e executor) LeaseCountActive(ctx context.Context) (map[store.LeaseMode]int64, error) {
	return shared.LeaseCountActive(ctx, e.q)
}

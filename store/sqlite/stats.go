package sqlite

import (
	"context"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
)

var _ store.StatsReader = (*Store)(nil)

// LeaseCountActive implements store.StatsReader; it reads index idx_leases_status_expires only.
func (e executor) LeaseCountActive(ctx context.Context) (map[store.LeaseMode]int64, error) {
	rows, err := e.r.QueryContext(ctx,
		"SELECT mode, COUNT(*) FROM orchestrator_leases WHERE status = ? GROUP BY mode", string(store.LeaseActive))
	if err != nil {
		return nil, fmt.Errorf("count active leases: %w", mapErr(err))
	}
	defer rows.Close()
	out := map[store.LeaseMode]int64{}
	for rows.Next() {
		var (
			mode string
			n    int64
		)
		if err := rows.Scan(&mode, &n); err != nil {
			return nil, fmt.Errorf("count active leases: %w", err)
		}
		out[store.LeaseMode(mode)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count active leases: %w", mapErr(err))
	}
	return out, nil
}

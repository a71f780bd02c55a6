package sqlite

import (
	"context"
	"fmt"
	"slices"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// WorkerMarkOffline marks the matching workers offline in one UPDATE … RETURNING.
func (e executor) WorkerMarkOffline(ctx context.Context, p store.WorkerOfflineParams) ([]string, error) {
	where, args, ok := shared.StaleWorkers(p)
	if !ok {
		return nil, nil
	}
	ids, err := sqlgen.QueryColumn[string](ctx, &shared, e.w, "UPDATE workers SET status = ?, in_flight = 0 WHERE "+where+
		" RETURNING worker_id", append([]any{string(store.WorkerOffline)}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("mark workers offline: %w", err)
	}
	slices.Sort(ids)
	return ids, nil
}

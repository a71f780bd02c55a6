package mysql

import (
	"context"
	"fmt"
	"slices"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// WorkerMarkOffline locks the matching workers in worker_id order, then marks them offline.
func (e executor) WorkerMarkOffline(ctx context.Context, p store.WorkerOfflineParams) ([]string, error) {
	where, args, ok := shared.StaleWorkers(p)
	if !ok {
		return nil, nil
	}
	ids, err := sqlgen.QueryColumn[string](ctx, &shared, e.q,
		"SELECT worker_id FROM workers WHERE "+where+" ORDER BY worker_id"+shared.ForUpdate, args...)
	if err != nil {
		return nil, fmt.Errorf("mark workers offline: %w", err)
	}
	for chunk := range slices.Chunk(ids, batchChunk) {
		_, err := e.q.ExecContext(ctx, "UPDATE workers SET status = ?, in_flight = 0 WHERE worker_id IN ("+
			sqlgen.Placeholders(len(chunk))+")", append([]any{string(store.WorkerOffline)}, sqlgen.Args(chunk)...)...)
		if err != nil {
			return nil, fmt.Errorf("mark workers offline: %w", mapErr(err))
		}
	}
	return ids, nil
}

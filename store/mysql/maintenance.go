package mysql

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// JobDeleteTerminal deletes in two steps so that it never locks more than the rows it
// deletes: a plain (non-locking, snapshot) SELECT finds up to Limit candidate ids, walking the
// (created_at, job_id) index from the oldest job — under a constant load the rows before the
// cutoff are almost all deletable, so the walk is short — and a DELETE by primary key removes
// those that still qualify, re-checking status and age against concurrent changes.
func (e executor) JobDeleteTerminal(ctx context.Context, p store.JobDeleteParams) (int, error) {
	where, args, ok := shared.DeletableJobs(p)
	if !ok {
		return 0, nil
	}
	// created_at <= finished_at, so created_at < before only narrows the index range.
	ids, err := sqlgen.QueryColumn[string](ctx, &shared, e.q, `SELECT job_id FROM orchestrator_jobs
		FORCE INDEX (idx_jobs_created) WHERE created_at < ? AND `+where+` ORDER BY created_at, job_id LIMIT ?`,
		slices.Concat([]any{dbTime(p.Before)}, args, []any{sqlgen.MaintenanceLimit(p.Limit)})...)
	if err != nil {
		return 0, fmt.Errorf("find %s jobs to delete: %w", p.Status, err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return shared.ExecCount(ctx, e.q, fmt.Sprintf("delete %d %s jobs", len(ids), p.Status), "DELETE FROM orchestrator_jobs WHERE job_id IN ("+
		sqlgen.Placeholders(len(ids))+") AND "+where, slices.Concat(sqlgen.Args(ids), args)...)
}

// LeaseDeleteEnded implements store.MaintenanceExecutor: per ended status it finds the leases
// through idx_leases_status_expires and deletes them by primary key, for the same reason as
// JobDeleteTerminal.
func (e executor) LeaseDeleteEnded(ctx context.Context, before time.Time, limit int) (int, error) {
	limit = sqlgen.MaintenanceLimit(limit)
	var tokens []string
	for _, status := range []store.LeaseStatus{store.LeaseReleased, store.LeaseExpired} {
		got, err := sqlgen.QueryColumn[string](ctx, &shared, e.q, `SELECT token FROM orchestrator_leases
			WHERE status = ? AND expires_at < ? AND ended_at < ? ORDER BY expires_at LIMIT ?`,
			string(status), dbTime(before), dbTime(before), limit-len(tokens))
		if err != nil {
			return 0, fmt.Errorf("find ended leases to delete: %w", err)
		}
		if tokens = append(tokens, got...); len(tokens) >= limit {
			break
		}
	}
	if len(tokens) == 0 {
		return 0, nil
	}
	return shared.ExecCount(ctx, e.q, fmt.Sprintf("delete %d ended leases", len(tokens)), "DELETE FROM orchestrator_leases WHERE token IN ("+
		sqlgen.Placeholders(len(tokens))+") AND status <> ?", append(sqlgen.Args(tokens), string(store.LeaseActive))...)
}

// AuditDeleteBefore implements store.MaintenanceExecutor (sqlgen.Driver.AuditDeleteBefore).
func (e executor) AuditDeleteBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	return shared.AuditDeleteBefore(ctx, e.q, before, limit)
}

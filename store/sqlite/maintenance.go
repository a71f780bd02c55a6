package sqlite

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// The deletes for retention take one statement each here (deleteFirst): with one writer at a
// time there is no other writer to re-check against, and each statement is atomic.

// JobDeleteTerminal deletes up to Limit terminal jobs past their retention, oldest created
// first.
func (e executor) JobDeleteTerminal(ctx context.Context, p store.JobDeleteParams) (int, error) {
	where, args, ok := shared.DeletableJobs(p)
	if !ok {
		return 0, nil
	}
	// created_at <= finished_at, so created_at < before only narrows the index range.
	q := deleteFirst("orchestrator_jobs", "job_id", "WHERE created_at < ? AND "+where+" ORDER BY created_at, job_id LIMIT ?")
	args = slices.Concat([]any{dbTime(p.Before)}, args, []any{sqlgen.MaintenanceLimit(p.Limit)})
	return shared.ExecCount(ctx, e.w, fmt.Sprintf("delete %s jobs", p.Status), q, args...)
}

// LeaseDeleteEnded implements store.MaintenanceExecutor, through idx_leases_status_expires.
func (e executor) LeaseDeleteEnded(ctx context.Context, before time.Time, limit int) (int, error) {
	return shared.ExecCount(ctx, e.w, "delete ended leases", deleteFirst("orchestrator_leases", "token",
		"WHERE status IN (?, ?) AND expires_at < ? AND ended_at < ? ORDER BY expires_at LIMIT ?"),
		string(store.LeaseReleased), string(store.LeaseExpired), dbTime(before), dbTime(before),
		sqlgen.MaintenanceLimit(limit))
}

// AuditDeleteBefore implements store.MaintenanceExecutor (sqlgen.Driver.AuditDeleteBefore).
func (e executor) AuditDeleteBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	return shared.AuditDeleteBefore(ctx, e.w, before, limit)
}

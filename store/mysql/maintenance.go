package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// Limits of maintenance statements. They are small on purpose: each statement locks at most
// this many rows, so a maintenance pass never stalls the hot path behind long-held locks.
const (
	maintenanceLimitDefault = 100
	maintenanceLimitMax     = 5000
)

// JobListDeadLetterUnpublished returns dead letters not yet on the DLQ stream in the order of
// the dispatch index (status, enqueued, available_at), which serves the query without sorting.
func (e executor) JobListDeadLetterUnpublished(ctx context.Context, limit int) ([]store.Job, error) {
	jobs, err := e.queryJobs(ctx, "SELECT "+jobColumnsNoPayload+` FROM orchestrator_jobs
		WHERE status = ? AND enqueued = 0 ORDER BY available_at LIMIT ?`,
		store.JobDeadLetter, sqlgen.ClampLimit(limit, maintenanceLimitDefault, maintenanceLimitMax))
	if err != nil {
		return nil, fmt.Errorf("list unpublished dead letters: %w", err)
	}
	return jobs, nil
}

// JobMarkDeadLetterPublished runs one guarded UPDATE per mark, so that it can report exactly
// which marks applied (dead letters are few; this is not a hot path).
func (e executor) JobMarkDeadLetterPublished(ctx context.Context, marks []store.JobEnqueued, now time.Time) ([]string, error) {
	var marked []string
	for _, m := range marks {
		if !sqlgen.ASCIIID(m.ID) {
			continue
		}
		res, err := e.q.ExecContext(ctx, `UPDATE orchestrator_jobs SET enqueued = 1, stream_id = ?,
			updated_at = ? WHERE job_id = ? AND status = ? AND enqueued = 0 AND attempts = ?`,
			m.StreamID, dbTime(now), m.ID, store.JobDeadLetter, m.Attempts)
		if err != nil {
			return marked, fmt.Errorf("mark dead letter %s published: %w", m.ID, mapErr(err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return marked, fmt.Errorf("mark dead letter %s published: %w", m.ID, err)
		} else if n > 0 {
			marked = append(marked, m.ID)
		}
	}
	return marked, nil
}

// JobMarkDeadLetterPurged marks a dead letter purged; see store.MaintenanceExecutor.
func (e executor) JobMarkDeadLetterPurged(ctx context.Context, id string, now time.Time) error {
	if !sqlgen.ASCIIID(id) {
		return fmt.Errorf("purge dead letter %q: %w", id, store.ErrNotFound)
	}
	res, err := e.q.ExecContext(ctx, `UPDATE orchestrator_jobs SET enqueued = 1, stream_id = ?,
		updated_at = ? WHERE job_id = ? AND status = ? AND stream_id <> ?`,
		store.StreamIDPurged, dbTime(now), id, store.JobDeadLetter, store.StreamIDPurged)
	if err != nil {
		return fmt.Errorf("purge dead letter %s: %w", id, mapErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("purge dead letter %s: %w", id, err)
	} else if n > 0 {
		return nil
	}
	if _, err := e.JobGet(ctx, id); err != nil {
		return fmt.Errorf("purge dead letter: %w", err)
	}
	return fmt.Errorf("purge dead letter %s: not a dead letter or already purged: %w", id, store.ErrConflict)
}

// JobListDeadLetters pages the dead-letter queue newest first, like JobList.
func (e executor) JobListDeadLetters(ctx context.Context, p store.DeadLetterListParams) ([]store.Job, error) {
	where := []string{"status = ?", "stream_id <> ?"}
	args := []any{store.JobDeadLetter, store.StreamIDPurged}
	if p.Type != "" {
		where, args = append(where, "type = ?"), append(args, p.Type)
	}
	if p.After != nil {
		if !sqlgen.ASCIIID(p.After.ID) {
			return nil, fmt.Errorf("list dead letters: cursor id %q is not ASCII", p.After.ID)
		}
		at := dbTime(p.After.CreatedAt)
		where = append(where, "(created_at < ? OR (created_at = ? AND job_id < ?))")
		args = append(args, at, at, p.After.ID)
	}
	q := "SELECT " + jobColumns + " FROM orchestrator_jobs WHERE " + strings.Join(where, " AND ") +
		" ORDER BY created_at DESC, job_id DESC LIMIT ?"
	args = append(args, sqlgen.ClampLimit(p.Limit, listLimitDefault, listLimitMax))
	jobs, err := e.queryJobs(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return jobs, nil
}

// JobScan walks one (type, status) in job_id order: the index (type, status) holds the primary
// key, so the keyset is served by the index without sorting.
func (e executor) JobScan(ctx context.Context, p store.JobScanParams) ([]store.Job, error) {
	if !sqlgen.ASCIIID(p.AfterID) {
		return nil, fmt.Errorf("scan jobs: cursor id %q is not ASCII", p.AfterID)
	}
	jobs, err := e.queryJobs(ctx, "SELECT "+jobColumnsNoPayload+` FROM orchestrator_jobs
		WHERE type = ? AND status = ? AND job_id > ? ORDER BY job_id LIMIT ?`,
		p.Type, p.Status, p.AfterID, sqlgen.ClampLimit(p.Limit, maintenanceLimitDefault, maintenanceLimitMax))
	if err != nil {
		return nil, fmt.Errorf("scan %s jobs of type %s: %w", p.Status, p.Type, err)
	}
	return jobs, nil
}

// JobClearEnqueued clears enqueued on the jobs among ids that have status (see
// store.MaintenanceExecutor), one UPDATE per 500 ids.
func (e executor) JobClearEnqueued(ctx context.Context, status store.JobStatus, ids []string, now time.Time) (int, error) {
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !sqlgen.ASCIIID(id) })
	total := 0
	for chunk := range slices.Chunk(ids, batchChunk) {
		args := slices.Concat([]any{dbTime(now)}, sqlgen.Args(chunk), []any{status, store.StreamIDPurged})
		res, err := e.q.ExecContext(ctx, `UPDATE orchestrator_jobs `+byKey+` SET enqueued = 0, updated_at = ?
			WHERE job_id IN (`+sqlgen.Placeholders(len(chunk))+`) AND status = ? AND enqueued = 1
			AND stream_id <> ?`, args...)
		if err != nil {
			return total, fmt.Errorf("clear enqueued flags: %w", mapErr(err))
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("clear enqueued flags: %w", err)
		}
		total += int(n)
	}
	return total, nil
}

// JobDeleteTerminal deletes in two steps so that it never locks more than the rows it
// deletes: a plain (non-locking, snapshot) SELECT finds up to Limit candidate ids, walking the
// (created_at, job_id) index from the oldest job — under a constant load the rows before the
// cutoff are almost all deletable, so the walk is short — and a DELETE by primary key removes
// those that still qualify, re-checking status and age against concurrent changes.
func (e executor) JobDeleteTerminal(ctx context.Context, p store.JobDeleteParams) (int, error) {
	if !p.Status.Terminal() || p.Before.IsZero() {
		return 0, nil
	}
	before := dbTime(p.Before)
	cond := []string{"status = ?", "COALESCE(finished_at, updated_at) < ?"}
	condArgs := []any{p.Status, before}
	if p.Type != "" {
		cond, condArgs = append(cond, "type = ?"), append(condArgs, p.Type)
	}
	if len(p.ExceptTypes) > 0 {
		cond = append(cond, "type NOT IN ("+sqlgen.Placeholders(len(p.ExceptTypes))+")")
		condArgs = append(condArgs, sqlgen.Args(p.ExceptTypes)...)
	}
	if p.PurgedOnly {
		cond, condArgs = append(cond, "stream_id = ?"), append(condArgs, store.StreamIDPurged)
	}
	where := strings.Join(cond, " AND ")
	// created_at <= finished_at, so created_at < before only narrows the index range.
	rows, err := e.q.QueryContext(ctx, `SELECT job_id FROM orchestrator_jobs
		FORCE INDEX (idx_jobs_created) WHERE created_at < ? AND `+where+
		` ORDER BY created_at, job_id LIMIT ?`,
		slices.Concat([]any{before}, condArgs, []any{sqlgen.ClampLimit(p.Limit, maintenanceLimitDefault, maintenanceLimitMax)})...)
	if err != nil {
		return 0, fmt.Errorf("find %s jobs to delete: %w", p.Status, mapErr(err))
	}
	ids, err := scanColumn[string](rows)
	if err != nil {
		return 0, fmt.Errorf("find %s jobs to delete: %w", p.Status, mapErr(err))
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return e.execCount(ctx, fmt.Sprintf("delete %d %s jobs", len(ids), p.Status), "DELETE FROM orchestrator_jobs WHERE job_id IN ("+
		sqlgen.Placeholders(len(ids))+") AND "+where, slices.Concat(sqlgen.Args(ids), condArgs)...)
}

// LeaseDeleteEnded implements store.MaintenanceExecutor: per ended status it finds the leases
// through idx_leases_status_expires and deletes them by primary key, for the same reason as
// JobDeleteTerminal.
func (e executor) LeaseDeleteEnded(ctx context.Context, before time.Time, limit int) (int, error) {
	limit = sqlgen.ClampLimit(limit, maintenanceLimitDefault, maintenanceLimitMax)
	var tokens []string
	for _, status := range []store.LeaseStatus{store.LeaseReleased, store.LeaseExpired} {
		rows, err := e.q.QueryContext(ctx, `SELECT token FROM orchestrator_leases
			WHERE status = ? AND expires_at < ? AND ended_at < ? ORDER BY expires_at LIMIT ?`,
			string(status), dbTime(before), dbTime(before), limit-len(tokens))
		if err != nil {
			return 0, fmt.Errorf("find ended leases to delete: %w", mapErr(err))
		}
		got, err := scanColumn[string](rows)
		if err != nil {
			return 0, fmt.Errorf("find ended leases to delete: %w", mapErr(err))
		}
		if tokens = append(tokens, got...); len(tokens) >= limit {
			break
		}
	}
	if len(tokens) == 0 {
		return 0, nil
	}
	return e.execCount(ctx, fmt.Sprintf("delete %d ended leases", len(tokens)), "DELETE FROM orchestrator_leases WHERE token IN ("+
		sqlgen.Placeholders(len(tokens))+") AND status <> ?", append(sqlgen.Args(tokens), string(store.LeaseActive))...)
}

// AuditDeleteBefore finds the oldest rows through idx_audit_ts and deletes them by primary
// key, for the same reason as JobDeleteTerminal.
func (e executor) AuditDeleteBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	rows, err := e.q.QueryContext(ctx, `SELECT id FROM orchestrator_audit WHERE ts < ?
		ORDER BY ts, id LIMIT ?`, dbTime(before), sqlgen.ClampLimit(limit, maintenanceLimitDefault, maintenanceLimitMax))
	if err != nil {
		return 0, fmt.Errorf("find audit rows to delete: %w", mapErr(err))
	}
	ids, err := scanColumn[int64](rows)
	if err != nil {
		return 0, fmt.Errorf("find audit rows to delete: %w", mapErr(err))
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return e.execCount(ctx, fmt.Sprintf("delete %d audit rows", len(ids)),
		"DELETE FROM orchestrator_audit WHERE id IN ("+sqlgen.Placeholders(len(ids))+")", sqlgen.Args(ids)...)
}

// scanColumn reads the single column of every row and closes rows.
func scanColumn[T any](rows *sql.Rows) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

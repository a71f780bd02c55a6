package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// Limits of maintenance statements, as in the MariaDB driver. Here they bound how long one
// statement holds the database's write lock.
const (
	maintenanceLimitDefault = 100
	maintenanceLimitMax     = 5000
)

// JobListDeadLetterUnpublished returns dead letters not yet on the DLQ stream, in available_at
// order (the dispatch index).
func (e executor) JobListDeadLetterUnpublished(ctx context.Context, limit int) ([]store.Job, error) {
	jobs, err := queryJobs(ctx, e.r, "SELECT "+jobColumnsNoPayload+` FROM orchestrator_jobs
		WHERE status = ? AND enqueued = 0 ORDER BY available_at LIMIT ?`,
		string(store.JobDeadLetter), sqlgen.ClampLimit(limit, maintenanceLimitDefault, maintenanceLimitMax))
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
		res, err := e.w.ExecContext(ctx, `UPDATE orchestrator_jobs SET enqueued = 1, stream_id = ?,
			updated_at = ? WHERE job_id = ? AND status = ? AND enqueued = 0 AND attempts = ?`,
			m.StreamID, dbTime(now), m.ID, string(store.JobDeadLetter), m.Attempts)
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
	res, err := e.w.ExecContext(ctx, `UPDATE orchestrator_jobs SET enqueued = 1, stream_id = ?,
		updated_at = ? WHERE job_id = ? AND status = ? AND stream_id <> ?`,
		store.StreamIDPurged, dbTime(now), id, string(store.JobDeadLetter), store.StreamIDPurged)
	if err != nil {
		return fmt.Errorf("purge dead letter %s: %w", id, mapErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("purge dead letter %s: %w", id, err)
	} else if n > 0 {
		return nil
	}
	var one int
	if err := e.w.QueryRowContext(ctx, "SELECT 1 FROM orchestrator_jobs WHERE job_id = ?", id).Scan(&one); err != nil {
		return fmt.Errorf("purge dead letter %s: %w", id, mapErr(err))
	}
	return fmt.Errorf("purge dead letter %s: not a dead letter or already purged: %w", id, store.ErrConflict)
}

// JobListDeadLetters pages the dead-letter queue newest first, like JobList.
func (e executor) JobListDeadLetters(ctx context.Context, p store.DeadLetterListParams) ([]store.Job, error) {
	where := []string{"status = ?", "stream_id <> ?"}
	args := []any{string(store.JobDeadLetter), store.StreamIDPurged}
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
	jobs, err := queryJobs(ctx, e.r, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return jobs, nil
}

// JobScan walks one (type, status) in job_id order: the index (type, status) holds the rowid,
// not job_id, so SQLite may sort, but the limit keeps each page small.
func (e executor) JobScan(ctx context.Context, p store.JobScanParams) ([]store.Job, error) {
	if !sqlgen.ASCIIID(p.AfterID) {
		return nil, fmt.Errorf("scan jobs: cursor id %q is not ASCII", p.AfterID)
	}
	jobs, err := queryJobs(ctx, e.r, "SELECT "+jobColumnsNoPayload+` FROM orchestrator_jobs
		WHERE type = ? AND status = ? AND job_id > ? ORDER BY job_id LIMIT ?`,
		p.Type, string(p.Status), p.AfterID, sqlgen.ClampLimit(p.Limit, maintenanceLimitDefault, maintenanceLimitMax))
	if err != nil {
		return nil, fmt.Errorf("scan %s jobs of type %s: %w", p.Status, p.Type, err)
	}
	return jobs, nil
}

// JobClearEnqueued clears enqueued on the jobs among ids that have the status and are not
// purged dead letters; see store.MaintenanceExecutor.
func (e executor) JobClearEnqueued(ctx context.Context, status store.JobStatus, ids []string, now time.Time) (int, error) {
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !sqlgen.ASCIIID(id) })
	total := 0
	for chunk := range slices.Chunk(ids, batchChunk) {
		args := slices.Concat([]any{dbTime(now)}, sqlgen.Args(chunk), []any{string(status), store.StreamIDPurged})
		res, err := e.w.ExecContext(ctx, `UPDATE orchestrator_jobs SET enqueued = 0, updated_at = ?
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

// JobDeleteTerminal deletes up to Limit terminal jobs past their retention, oldest created
// first, in one DELETE whose rows a subquery picks: with one writer at a time there is no
// other writer to re-check against, and the statement is atomic.
func (e executor) JobDeleteTerminal(ctx context.Context, p store.JobDeleteParams) (int, error) {
	if !p.Status.Terminal() || p.Before.IsZero() {
		return 0, nil
	}
	before := dbTime(p.Before)
	cond := []string{"status = ?", "COALESCE(finished_at, updated_at) < ?"}
	args := []any{string(p.Status), before}
	if p.Type != "" {
		cond, args = append(cond, "type = ?"), append(args, p.Type)
	}
	if len(p.ExceptTypes) > 0 {
		cond = append(cond, "type NOT IN ("+sqlgen.Placeholders(len(p.ExceptTypes))+")")
		args = append(args, sqlgen.Args(p.ExceptTypes)...)
	}
	if p.PurgedOnly {
		cond, args = append(cond, "stream_id = ?"), append(args, store.StreamIDPurged)
	}
	// created_at <= finished_at, so created_at < before only narrows the index range.
	q := `DELETE FROM orchestrator_jobs WHERE job_id IN (SELECT job_id FROM orchestrator_jobs
		WHERE created_at < ? AND ` + strings.Join(cond, " AND ") + ` ORDER BY created_at, job_id LIMIT ?)`
	args = slices.Concat([]any{before}, args, []any{sqlgen.ClampLimit(p.Limit, maintenanceLimitDefault, maintenanceLimitMax)})
	return e.execCount(ctx, fmt.Sprintf("delete %s jobs", p.Status), q, args...)
}

// LeaseDeleteEnded implements store.MaintenanceExecutor in one statement, through
// idx_leases_status_expires.
func (e executor) LeaseDeleteEnded(ctx context.Context, before time.Time, limit int) (int, error) {
	return e.execCount(ctx, "delete ended leases", `DELETE FROM orchestrator_leases WHERE token IN (
		SELECT token FROM orchestrator_leases WHERE status IN (?, ?) AND expires_at < ? AND ended_at < ?
		ORDER BY expires_at LIMIT ?)`,
		string(store.LeaseReleased), string(store.LeaseExpired), dbTime(before), dbTime(before),
		sqlgen.ClampLimit(limit, maintenanceLimitDefault, maintenanceLimitMax))
}

// AuditDeleteBefore deletes up to limit audit rows older than before, oldest first (through
// idx_audit_ts), in one statement.
func (e executor) AuditDeleteBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	return e.execCount(ctx, "delete audit rows", `DELETE FROM orchestrator_audit WHERE id IN (
		SELECT id FROM orchestrator_audit WHERE ts < ? ORDER BY ts, id LIMIT ?)`,
		dbTime(before), sqlgen.ClampLimit(limit, maintenanceLimitDefault, maintenanceLimitMax))
}

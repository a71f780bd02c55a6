package sqlgen

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the maintenance statements that both dialects share
// (store.MaintenanceExecutor); the deletes for retention of jobs and leases differ and stay in
// the drivers.

// JobListDeadLetterUnpublished returns dead letters not yet on the DLQ stream in the order of
// the dispatch index (status, enqueued, available_at), which serves the query without sorting.
func (e Executor) JobListDeadLetterUnpublished(ctx context.Context, limit int) ([]store.Job, error) {
	jobs, err := e.d.QueryJobs(ctx, e.r, "SELECT "+JobColumnsNoPayload+` FROM orchestrator_jobs
		WHERE status = ? AND enqueued = 0 ORDER BY available_at LIMIT ?`,
		string(store.JobDeadLetter), MaintenanceLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("list unpublished dead letters: %w", err)
	}
	return jobs, nil
}

// JobMarkDeadLetterPublished runs one guarded UPDATE per mark, so that it can report exactly
// which marks applied (dead letters are few; this is not a hot path).
func (e Executor) JobMarkDeadLetterPublished(ctx context.Context, marks []store.JobEnqueued, now time.Time) ([]string, error) {
	var marked []string
	for _, m := range marks {
		if !ASCIIID(m.ID) {
			continue
		}
		n, err := e.d.ExecCount(ctx, e.w, "mark dead letter "+m.ID+" published", `UPDATE orchestrator_jobs
			SET enqueued = 1, stream_id = ?, updated_at = ? WHERE job_id = ? AND status = ? AND enqueued = 0
			AND attempts = ?`, m.StreamID, e.d.Time(now), m.ID, string(store.JobDeadLetter), m.Attempts)
		if err != nil {
			return marked, err
		}
		if n > 0 {
			marked = append(marked, m.ID)
		}
	}
	return marked, nil
}

// JobMarkDeadLetterPurged marks a dead letter purged; see store.MaintenanceExecutor.
func (e Executor) JobMarkDeadLetterPurged(ctx context.Context, id string, now time.Time) error {
	what := "purge dead letter " + id
	if !ASCIIID(id) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	n, err := e.d.ExecCount(ctx, e.w, what, `UPDATE orchestrator_jobs SET enqueued = 1, stream_id = ?,
		updated_at = ? WHERE job_id = ? AND status = ? AND stream_id <> ?`,
		store.StreamIDPurged, e.d.Time(now), id, string(store.JobDeadLetter), store.StreamIDPurged)
	if err != nil || n > 0 {
		return err
	}
	var one int
	if err := e.w.QueryRowContext(ctx, "SELECT 1 FROM orchestrator_jobs WHERE job_id = ?", id).Scan(&one); err != nil {
		return fmt.Errorf("%s: %w", what, e.d.MapErr(err))
	}
	return fmt.Errorf("%s: not a dead letter or already purged: %w", what, store.ErrConflict)
}

// JobListDeadLetters pages the dead-letter queue newest first, like JobList.
func (e Executor) JobListDeadLetters(ctx context.Context, p store.DeadLetterListParams) ([]store.Job, error) {
	f := filter{where: []string{"status = ?", "stream_id <> ?"}, args: []any{string(store.JobDeadLetter), store.StreamIDPurged}}
	f.addIf("type = ?", p.Type)
	return e.newestJobs(ctx, "list dead letters", f, p.After, p.Limit)
}

// JobScan walks one (type, status) in job_id order. MariaDB's index (type, status) holds the
// primary key, so the keyset is served by the index without sorting; SQLite's holds the rowid
// and may sort, but the limit keeps each page small.
func (e Executor) JobScan(ctx context.Context, p store.JobScanParams) ([]store.Job, error) {
	if !ASCIIID(p.AfterID) {
		return nil, fmt.Errorf("scan jobs: cursor id %q is not ASCII", p.AfterID)
	}
	jobs, err := e.d.QueryJobs(ctx, e.r, "SELECT "+JobColumnsNoPayload+` FROM orchestrator_jobs
		WHERE type = ? AND status = ? AND job_id > ? ORDER BY job_id LIMIT ?`,
		p.Type, string(p.Status), p.AfterID, MaintenanceLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("scan %s jobs of type %s: %w", p.Status, p.Type, err)
	}
	return jobs, nil
}

// JobClearEnqueued clears enqueued on the jobs among ids that have the status and are not
// purged dead letters (see store.MaintenanceExecutor), one UPDATE per chunk of ids.
func (e Executor) JobClearEnqueued(ctx context.Context, status store.JobStatus, ids []string, now time.Time) (int, error) {
	total := 0
	for chunk := range slices.Chunk(ASCIIIDs(ids), max(e.d.Chunk, 1)) {
		args := slices.Concat([]any{e.d.Time(now)}, Args(chunk), []any{string(status), store.StreamIDPurged})
		n, err := e.d.ExecCount(ctx, e.w, "clear enqueued flags", `UPDATE `+e.d.table("orchestrator_jobs")+
			` SET enqueued = 0, updated_at = ? WHERE job_id IN (`+Placeholders(len(chunk))+`)
			AND status = ? AND enqueued = 1 AND stream_id <> ?`, args...)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// JobSetWaiting sets waiting_reason on the pending jobs among ids, one UPDATE per chunk of ids.
func (e Executor) JobSetWaiting(ctx context.Context, ids []string, reason string) (int, error) {
	total := 0
	reason = TruncateUTF8(reason, WaitingReasonMax)
	for chunk := range slices.Chunk(ASCIIIDs(ids), max(e.d.Chunk, 1)) {
		args := slices.Concat([]any{reason}, Args(chunk), []any{string(store.JobPending)})
		n, err := e.d.ExecCount(ctx, e.w, "set waiting reasons", `UPDATE `+e.d.table("orchestrator_jobs")+
			` SET waiting_reason = ? WHERE job_id IN (`+Placeholders(len(chunk))+`) AND status = ?`, args...)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// DeletableJobs is the condition that JobDeleteTerminal's jobs meet, past their retention
// (store.JobDeleteParams), with its arguments; ok is false when p selects no job.
func (d *Driver) DeletableJobs(p store.JobDeleteParams) (where string, args []any, ok bool) {
	if !p.Status.Terminal() || p.Before.IsZero() {
		return "", nil, false
	}
	f := filter{where: []string{"status = ?", "COALESCE(finished_at, updated_at) < ?"},
		args: []any{string(p.Status), d.Time(p.Before)}}
	f.addIf("type = ?", p.Type)
	if len(p.ExceptTypes) > 0 {
		f.add("type NOT IN ("+Placeholders(len(p.ExceptTypes))+")", Args(p.ExceptTypes)...)
	}
	if p.PurgedOnly {
		f.add("stream_id = ?", store.StreamIDPurged)
	}
	return strings.Join(f.where, " AND "), f.args, true
}

// AuditDeleteBefore implements store.MaintenanceExecutor for both drivers, reading and deleting
// through x: it reads the oldest rows in id order (the primary key; ids follow time, and the
// table has no index on ts, which every audit insert would pay for) and deletes, by primary
// key, the leading run of them older than before. A row out of time order (another instance's
// clock) holds back the rows after it until it is old enough too.
func (d *Driver) AuditDeleteBefore(ctx context.Context, x Conn, before time.Time, limit int) (int, error) {
	// Each row's id while its ts is before the cut-off, 0 otherwise.
	ids, err := QueryColumn[int64](ctx, d, x, `SELECT CASE WHEN ts < ? THEN id ELSE 0 END FROM orchestrator_audit
		ORDER BY id LIMIT ?`, d.Time(before), MaintenanceLimit(limit))
	if err != nil {
		return 0, fmt.Errorf("find audit rows to delete: %w", err)
	}
	if i := slices.Index(ids, 0); i >= 0 {
		ids = ids[:i]
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return d.ExecCount(ctx, x, fmt.Sprintf("delete %d audit rows", len(ids)),
		"DELETE FROM orchestrator_audit WHERE id IN ("+Placeholders(len(ids))+")", Args(ids)...)
}

package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// queryJobs runs a SELECT of jobColumns and scans every row.
func (e executor) queryJobs(ctx context.Context, q string, args ...any) ([]store.Job, error) {
	rows, err := e.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	return scanRows(rows, scanJob)
}

// queryJobHolders reads the holders of ids (at most batchChunk of them).
func (e executor) queryJobHolders(ctx context.Context, ids []string) ([]store.JobHolder, error) {
	rows, err := e.q.QueryContext(ctx, "SELECT job_id, status, worker_id FROM orchestrator_jobs WHERE job_id IN ("+
		sqlgen.Placeholders(len(ids))+") ORDER BY job_id", sqlgen.Args(ids)...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	return scanRows(rows, func(row scanner) (store.JobHolder, error) {
		var h store.JobHolder
		err := row.Scan(&h.ID, &h.Status, &h.WorkerID)
		return h, mapErr(err)
	})
}

// execCount runs a write and returns how many rows it changed; what names it in errors.
func (e executor) execCount(ctx context.Context, what, q string, args ...any) (int, error) {
	return shared.ExecCount(ctx, e.q, what, q, args...)
}

// scanRows scans the rows of the current result set with scan.
func scanRows[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanJob(row scanner) (store.Job, error) {
	var (
		j                  store.Job
		status             string
		timeoutMS          int64
		started, finished  sql.NullTime
		payload, resultRaw []byte
	)
	err := row.Scan(&j.ID, &j.Type, &j.Agent, &payload, &status, &j.Attempts, &j.MaxAttempts,
		&j.AvailableAt, &j.Enqueued, &j.StreamID, &j.OwnerPool, &j.WorkerID, &j.LeaseToken,
		&j.GPUMemoryMB, &timeoutMS, &resultRaw, &j.LastError, &j.CreatedAt, &j.UpdatedAt,
		&started, &finished)
	if err != nil {
		return store.Job{}, err
	}
	j.Status = store.JobStatus(status)
	j.Payload = sqlgen.NilIfEmpty(payload)
	j.Result = sqlgen.NilIfEmpty(resultRaw)
	j.Timeout = time.Duration(timeoutMS) * time.Millisecond
	if started.Valid {
		j.StartedAt = &started.Time
	}
	if finished.Valid {
		j.FinishedAt = &finished.Time
	}
	return j, nil
}

// dbTime is how a time is stored: UTC, truncated (not rounded) to DATETIME(6)'s microseconds,
// so that what a caller gets back equals what it would read.
func dbTime(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

// nullTime stores the zero time as NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return dbTime(t)
}

// byKey makes an UPDATE of rows listed by primary key find them by it (sqlgen.Encoding.ByKey):
// on a small table the optimizer may scan the status index instead, locking the rows of
// concurrent transactions as it goes, and deadlock with them.
const byKey = "FORCE INDEX (PRIMARY)"

// shared is this driver's side of the batch writes both drivers share (package sqlgen).
var shared = sqlgen.Driver{
	Encoding: sqlgen.Encoding{Time: func(t time.Time) any { return dbTime(t) }, ByKey: byKey},
	MapErr:   mapErr,
	Chunk:    batchChunk,
}

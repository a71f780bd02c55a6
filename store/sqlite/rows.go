package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// execCount runs a write and returns how many rows it changed; what names it in errors.
func (e executor) execCount(ctx context.Context, what, q string, args ...any) (int, error) {
	return shared.ExecCount(ctx, e.w, what, q, args...)
}

// queryJobHolders reads the holders of ids (at most batchChunk of them).
func queryJobHolders(ctx context.Context, q querier, ids []string) ([]store.JobHolder, error) {
	rows, err := q.QueryContext(ctx, "SELECT job_id, status, worker_id FROM orchestrator_jobs WHERE job_id IN ("+
		sqlgen.Placeholders(len(ids))+") ORDER BY job_id", sqlgen.Args(ids)...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	var out []store.JobHolder
	for rows.Next() {
		var h store.JobHolder
		if err := rows.Scan(&h.ID, &h.Status, &h.WorkerID); err != nil {
			return nil, mapErr(err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

// queryJobs runs a SELECT of jobColumns and scans every row.
func queryJobs(ctx context.Context, q querier, query string, args ...any) ([]store.Job, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	var jobs []store.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return jobs, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanJob(row scanner) (store.Job, error) {
	var (
		j                           store.Job
		status                      string
		timeoutMS                   int64
		available, created, updated dbTimeScan
		started, finished           dbTimeScan
		payload, resultRaw          []byte
	)
	err := row.Scan(&j.ID, &j.Type, &j.Agent, &payload, &status, &j.Attempts, &j.MaxAttempts,
		&available, &j.Enqueued, &j.StreamID, &j.OwnerPool, &j.WorkerID, &j.LeaseToken,
		&j.GPUMemoryMB, &timeoutMS, &resultRaw, &j.LastError, &created, &updated,
		&started, &finished)
	if err != nil {
		return store.Job{}, err
	}
	j.Status = store.JobStatus(status)
	j.Payload = sqlgen.NilIfEmpty(payload)
	j.Result = sqlgen.NilIfEmpty(resultRaw)
	j.Timeout = time.Duration(timeoutMS) * time.Millisecond
	j.AvailableAt, j.CreatedAt, j.UpdatedAt = available.t, created.t, updated.t
	j.StartedAt, j.FinishedAt = started.ptr(), finished.ptr()
	return j, nil
}

// dbTimeScan reads a time column: INTEGER microseconds since the Unix epoch, or NULL (the
// zero time).
type dbTimeScan struct {
	t     time.Time
	valid bool
}

// Scan implements sql.Scanner.
func (d *dbTimeScan) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*d = dbTimeScan{}
	case int64:
		*d = dbTimeScan{t: time.UnixMicro(v).UTC(), valid: true}
	default:
		return fmt.Errorf("scan time: want microseconds, got %T", src)
	}
	return nil
}

func (d dbTimeScan) ptr() *time.Time {
	if !d.valid {
		return nil
	}
	t := d.t
	return &t
}

// dbTime is how a time is written: microseconds since the Unix epoch. Like MariaDB's
// DATETIME(6) it truncates (not rounds), so that what a caller gets back equals what it would
// read.
func dbTime(t time.Time) int64 {
	return t.UnixMicro()
}

// truncTime is the time.Time dbTime stores, in UTC.
func truncTime(t time.Time) time.Time {
	return time.UnixMicro(t.UnixMicro()).UTC()
}

// nullTime stores the zero time as NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return dbTime(t)
}

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// executor implements store.Executor. On the Store, r is the read-only pool and w the writer
// connection; in a transaction both are the transaction.
type executor struct {
	r querier
	w querier
}

// shared is this driver's side of the batch writes both drivers share (package sqlgen).
var shared = sqlgen.Driver{
	Encoding: sqlgen.Encoding{Time: func(t time.Time) any { return dbTime(t) }},
	MapErr:   mapErr,
	Chunk:    batchChunk,
}

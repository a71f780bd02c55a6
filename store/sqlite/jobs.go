package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// Limits of list queries, as in the MariaDB driver.
const (
	listLimitDefault     = 100
	listLimitMax         = 1000
	dispatchLimitDefault = 100
	dispatchLimitMax     = 10000
	// batchChunk bounds the rows or ids one statement carries (IN lists, multi-row inserts),
	// far below SQLite's limit of 32766 bound parameters.
	batchChunk = 500
)

const jobColumns = "job_id, type, agent, payload, " + jobColumnsAfterPayload

// jobColumnsNoPayload reads a job without its payload, for the maintenance passes that walk
// many jobs and need none (the same columns as MariaDB's driver reads).
const jobColumnsNoPayload = "job_id, type, agent, NULL, " + jobColumnsAfterPayload

const jobColumnsAfterPayload = `status, attempts, max_attempts, available_at,
	enqueued, stream_id, owner_pool, worker_id, lease_token, gpu_memory_mb, timeout_ms, result,
	last_error, created_at, updated_at, started_at, finished_at`

// JobInsert inserts a new pending job, or returns the existing job with inserted=false when the
// id is taken (INSERT ... ON CONFLICT DO NOTHING, then a read). A zero AvailableAt means Now.
// The read sees the existing row: writers are serialised, so it was committed before this
// insert could run, or it was written earlier in the same transaction.
func (e executor) JobInsert(ctx context.Context, p store.JobInsertParams) (store.Job, bool, error) {
	if !sqlgen.ASCIIID(p.ID) {
		return store.Job{}, false, fmt.Errorf("insert job %q: a job id must be ASCII", p.ID)
	}
	j := sqlgen.NewJob(p)
	res, err := e.w.ExecContext(ctx, `INSERT INTO orchestrator_jobs (job_id, type, agent, payload,
		status, attempts, max_attempts, available_at, enqueued, gpu_memory_mb, timeout_ms,
		created_at, updated_at) VALUES (?, ?, ?, ?, ?, 0, ?, ?, 0, ?, ?, ?, ?)
		ON CONFLICT (job_id) DO NOTHING`,
		j.ID, j.Type, j.Agent, sqlgen.JSONArg(j.Payload), string(j.Status), j.MaxAttempts, dbTime(j.AvailableAt),
		j.GPUMemoryMB, j.Timeout.Milliseconds(), dbTime(j.CreatedAt), dbTime(j.CreatedAt))
	if err != nil {
		return store.Job{}, false, fmt.Errorf("insert job %s: %w", p.ID, mapErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return store.Job{}, false, fmt.Errorf("insert job %s: %w", p.ID, err)
	} else if n == 1 {
		return j, true, nil
	}
	existing, err := scanJob(e.w.QueryRowContext(ctx,
		"SELECT "+jobColumns+" FROM orchestrator_jobs WHERE job_id = ?", p.ID))
	if err != nil {
		return store.Job{}, false, fmt.Errorf("read existing job %s: %w", p.ID, mapErr(err))
	}
	return existing, false, nil
}

// JobInsertMany inserts new pending jobs with one multi-row INSERT per 500, all or none: when
// any id is taken (or appears twice) it fails with ErrConflict and inserts nothing of that
// statement, and the caller rolls back. It returns the rows as stored.
func (e executor) JobInsertMany(ctx context.Context, ps []store.JobInsertParams) ([]store.Job, error) {
	return shared.InsertJobs(ctx, e.w, ps)
}

// JobGet returns one job or store.ErrNotFound.
func (e executor) JobGet(ctx context.Context, id string) (store.Job, error) {
	if !sqlgen.ASCIIID(id) {
		return store.Job{}, fmt.Errorf("get job %q: %w", id, store.ErrNotFound)
	}
	j, err := scanJob(e.r.QueryRowContext(ctx,
		"SELECT "+jobColumns+" FROM orchestrator_jobs WHERE job_id = ?", id))
	if err != nil {
		return store.Job{}, fmt.Errorf("get job %s: %w", id, mapErr(err))
	}
	return j, nil
}

// JobHolders returns the status and worker of the existing jobs among ids, in id order per
// chunk, without their payloads.
func (e executor) JobHolders(ctx context.Context, ids []string) ([]store.JobHolder, error) {
	var out []store.JobHolder
	for chunk := range slices.Chunk(sqlgen.DistinctIDs(ids), batchChunk) {
		got, err := queryJobHolders(ctx, e.r, chunk)
		if err != nil {
			return nil, fmt.Errorf("get job holders: %w", err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// JobGetMany returns the existing jobs among ids, in id order per chunk. forUpdate needs no
// lock here: inside WithTx the transaction already holds the database's write lock (see the
// package doc), and outside a transaction it means nothing, as with MariaDB.
func (e executor) JobGetMany(ctx context.Context, ids []string, _ bool) ([]store.Job, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var jobs []store.Job
	for chunk := range slices.Chunk(sqlgen.DistinctIDs(ids), batchChunk) {
		q := "SELECT " + jobColumns + " FROM orchestrator_jobs WHERE job_id IN (" +
			sqlgen.Placeholders(len(chunk)) + ") ORDER BY job_id"
		got, err := queryJobs(ctx, e.r, q, sqlgen.Args(chunk)...)
		if err != nil {
			return nil, fmt.Errorf("get jobs: %w", err)
		}
		jobs = append(jobs, got...)
	}
	return jobs, nil
}

// JobList returns a page of jobs ordered by (created_at DESC, job_id DESC), after the cursor.
// Limit is clamped to 1..1000 (default 100).
func (e executor) JobList(ctx context.Context, p store.JobListParams) ([]store.Job, error) {
	var (
		where []string
		args  []any
	)
	if p.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(p.Status))
	}
	if p.Type != "" {
		where, args = append(where, "type = ?"), append(args, p.Type)
	}
	if p.Agent != "" {
		where, args = append(where, "agent = ?"), append(args, p.Agent)
	}
	if p.After != nil {
		if !sqlgen.ASCIIID(p.After.ID) {
			return nil, fmt.Errorf("list jobs: cursor id %q is not ASCII", p.After.ID)
		}
		at := dbTime(p.After.CreatedAt)
		where = append(where, "(created_at < ? OR (created_at = ? AND job_id < ?))")
		args = append(args, at, at, p.After.ID)
	}
	q := "SELECT " + jobColumns + " FROM orchestrator_jobs"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, job_id DESC LIMIT ?"
	args = append(args, sqlgen.ClampLimit(p.Limit, listLimitDefault, listLimitMax))
	jobs, err := queryJobs(ctx, e.r, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// JobUpdate applies one compare-and-set write: a single UPDATE guarded by status (and attempts
// and worker when asked). When no row matches it tells ErrNotFound from ErrConflict with one
// more lookup. A non-nil StartedAt or FinishedAt pointing at the zero time clears the column.
func (e executor) JobUpdate(ctx context.Context, u store.JobUpdate) error {
	return shared.UpdateJob(ctx, e.w, u)
}

// JobUpdateMany applies the compare-and-set writes of distinct jobs with as few UPDATEs as their
// shapes allow (sqlgen.JobUpdates). One write is JobUpdate, with its precise error; for more, a
// statement that matches fewer rows than it carries fails the whole call with ErrConflict, and
// the caller's transaction is rolled back.
func (e executor) JobUpdateMany(ctx context.Context, us []store.JobUpdate) error {
	return shared.UpdateJobs(ctx, e.w, us)
}

// JobListDispatchable returns due, unpublished pending jobs, oldest available first.
func (e executor) JobListDispatchable(ctx context.Context, p store.DispatchParams) ([]store.Job, error) {
	q, args := shared.Dispatchable(p, sqlgen.ClampLimit(p.Limit, dispatchLimitDefault, dispatchLimitMax))
	jobs, err := queryJobs(ctx, e.r, "SELECT "+jobColumnsNoPayload+q, args...)
	if err != nil {
		return nil, fmt.Errorf("list dispatchable jobs: %w", err)
	}
	return jobs, nil
}

// JobMarkPublished implements store.JobExecutor. SQLite has no round trip to save: it is
// JobMarkEnqueued, uncounted.
func (e executor) JobMarkPublished(ctx context.Context, marks []store.JobEnqueued) error {
	_, err := e.JobMarkEnqueued(ctx, marks)
	return err
}

// JobMarkEnqueued sets enqueued=1 and the stream id of every mark that still matches (pending,
// not enqueued, same attempts), with one UPDATE per 500 marks joined to the marks as a VALUES
// list. When an id appears twice in a chunk the first mark wins, as with the MariaDB driver.
func (e executor) JobMarkEnqueued(ctx context.Context, marks []store.JobEnqueued) (int, error) {
	marks = slices.DeleteFunc(slices.Clone(marks), func(m store.JobEnqueued) bool { return !sqlgen.ASCIIID(m.ID) })
	total := 0
	for chunk := range slices.Chunk(marks, batchChunk) {
		var (
			values strings.Builder
			args   = make([]any, 0, 3*len(chunk)+1)
			seen   = make(map[string]bool, len(chunk))
		)
		for _, m := range chunk {
			if seen[m.ID] {
				continue
			}
			seen[m.ID] = true
			if len(args) > 0 {
				values.WriteString(", ")
			}
			values.WriteString("(?, ?, ?)")
			args = append(args, m.ID, m.StreamID, m.Attempts)
		}
		q := `WITH m(id, stream_id, attempts) AS (VALUES ` + values.String() + `)
			UPDATE orchestrator_jobs SET enqueued = 1, stream_id = m.stream_id
			FROM m
			WHERE orchestrator_jobs.job_id = m.id AND orchestrator_jobs.status = ?
				AND orchestrator_jobs.enqueued = 0 AND orchestrator_jobs.attempts = m.attempts`
		args = append(args, string(store.JobPending))
		res, err := e.w.ExecContext(ctx, q, args...)
		if err != nil {
			return total, fmt.Errorf("mark jobs enqueued: %w", mapErr(err))
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("mark jobs enqueued: %w", err)
		}
		total += int(n)
	}
	return total, nil
}

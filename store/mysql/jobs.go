package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// Limits of list queries.
const (
	listLimitDefault     = 100
	listLimitMax         = 1000
	dispatchLimitDefault = 100
	dispatchLimitMax     = 10000
	// batchChunk bounds the rows or ids one statement carries (IN lists, multi-row inserts).
	batchChunk = 500
)

const jobColumns = "job_id, type, agent, payload, " + jobColumnsAfterPayload

// jobColumnsNoPayload reads a job without its payload (up to max_payload_bytes), for the
// maintenance passes that walk many jobs and need none.
const jobColumnsNoPayload = "job_id, type, agent, NULL, " + jobColumnsAfterPayload

const jobColumnsAfterPayload = `status, attempts, max_attempts, available_at,
	enqueued, stream_id, owner_pool, worker_id, lease_token, gpu_memory_mb, timeout_ms, result,
	last_error, created_at, updated_at, started_at, finished_at`

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// executor implements store.Executor on a pool (Store) or on one transaction (tx).
type executor struct {
	q querier
}

// JobInsert inserts a new pending job, or returns the existing job with inserted=false when the
// id is taken. A zero AvailableAt means Now.
func (e executor) JobInsert(ctx context.Context, p store.JobInsertParams) (store.Job, bool, error) {
	if !sqlgen.ASCIIID(p.ID) {
		return store.Job{}, false, fmt.Errorf("insert job %q: a job id must be ASCII", p.ID)
	}
	j := sqlgen.NewJob(p)
	_, err := e.q.ExecContext(ctx, `INSERT INTO orchestrator_jobs (job_id, type, agent, payload,
		status, attempts, max_attempts, available_at, enqueued, gpu_memory_mb, timeout_ms,
		created_at, updated_at) VALUES (?, ?, ?, ?, ?, 0, ?, ?, 0, ?, ?, ?, ?)`,
		j.ID, j.Type, j.Agent, sqlgen.JSONArg(j.Payload), j.Status, j.MaxAttempts, j.AvailableAt,
		j.GPUMemoryMB, j.Timeout.Milliseconds(), j.CreatedAt, j.CreatedAt)
	if err == nil {
		return j, true, nil
	}
	if err = mapErr(err); !errors.Is(err, store.ErrConflict) {
		return store.Job{}, false, fmt.Errorf("insert job %s: %w", p.ID, err)
	}
	// The id is taken. A locking read sees the latest committed row even when the calling
	// transaction's snapshot predates it.
	existing, err := scanJob(e.q.QueryRowContext(ctx,
		"SELECT "+jobColumns+" FROM orchestrator_jobs WHERE job_id = ? LOCK IN SHARE MODE", p.ID))
	if err != nil {
		return store.Job{}, false, fmt.Errorf("read existing job %s: %w", p.ID, mapErr(err))
	}
	return existing, false, nil
}

// JobInsertMany inserts new pending jobs with one multi-row INSERT per 500, all or none: when
// any id is taken (or appears twice) it fails with ErrConflict and inserts nothing of that
// statement, and the caller rolls back. It returns the rows as stored. In a transaction the
// INSERTs are held and go out with the next statement or with COMMIT (a submit's insert, audit
// rows and COMMIT are one round trip); a taken id then fails that statement.
func (e executor) JobInsertMany(ctx context.Context, ps []store.JobInsertParams) ([]store.Job, error) {
	if t, ok := e.q.(*txConn); ok {
		return shared.InsertJobs(ctx, heldExecer{t}, ps)
	}
	return shared.InsertJobs(ctx, e.q, ps)
}

// heldExecer holds every statement it is given in a transaction, for its next round trip; the
// statement has no result yet.
type heldExecer struct{ t *txConn }

func (h heldExecer) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	h.t.hold("insert jobs", query, args)
	return driver.ResultNoRows, nil
}

// JobGet returns one job or store.ErrNotFound.
func (e executor) JobGet(ctx context.Context, id string) (store.Job, error) {
	if !sqlgen.ASCIIID(id) {
		return store.Job{}, fmt.Errorf("get job %q: %w", id, store.ErrNotFound)
	}
	j, err := scanJob(e.q.QueryRowContext(ctx,
		"SELECT "+jobColumns+" FROM orchestrator_jobs WHERE job_id = ?", id))
	if err != nil {
		return store.Job{}, fmt.Errorf("get job %s: %w", id, mapErr(err))
	}
	return j, nil
}

// JobGetMany returns the existing jobs among ids. With forUpdate the rows are locked in id
// order (sorted, chunked), which keeps concurrent claimers from deadlocking each other.
func (e executor) JobGetMany(ctx context.Context, ids []string, forUpdate bool) ([]store.Job, error) {
	ids = sqlgen.DistinctIDs(ids)
	var jobs []store.Job
	for chunk := range slices.Chunk(ids, batchChunk) {
		got, err := e.queryJobs(ctx, selectJobsByID(len(chunk), forUpdate), sqlgen.Args(chunk)...)
		if err != nil {
			return nil, fmt.Errorf("get jobs: %w", err)
		}
		jobs = append(jobs, got...)
	}
	return jobs, nil
}

// JobHolders returns the status and worker of the existing jobs among ids, in id order per
// chunk. It reads no payload: a worker asks about every job it runs on each call.
func (e executor) JobHolders(ctx context.Context, ids []string) ([]store.JobHolder, error) {
	var out []store.JobHolder
	for chunk := range slices.Chunk(sqlgen.DistinctIDs(ids), batchChunk) {
		got, err := e.queryJobHolders(ctx, chunk)
		if err != nil {
			return nil, fmt.Errorf("get job holders: %w", err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// lockJobsByID is the locking read of ids (at most batchChunk of them) in id order, which reads
// the payloads of the jobs among withPayload only (store.LockParams), and its arguments.
func lockJobsByID(ids, withPayload []string) (string, []any) {
	var payload []any
	for _, id := range withPayload {
		if _, ok := slices.BinarySearch(ids, id); ok {
			payload = append(payload, id)
		}
	}
	expr := "payload"
	switch {
	case len(payload) == 0:
		expr = "NULL"
	case len(payload) < len(ids):
		expr = "CASE WHEN job_id IN (" + sqlgen.Placeholders(len(payload)) + ") THEN payload END"
	default:
		payload = nil // every job's payload: no list needed
	}
	q := "SELECT job_id, type, agent, " + expr + ", " + jobColumnsAfterPayload +
		" FROM orchestrator_jobs WHERE job_id IN (" + sqlgen.Placeholders(len(ids)) + ") ORDER BY job_id FOR UPDATE"
	return q, append(payload, sqlgen.Args(ids)...)
}

// selectJobsByID reads n jobs by id in id order, locking them when forUpdate.
func selectJobsByID(n int, forUpdate bool) string {
	return "SELECT " + jobColumns + " FROM orchestrator_jobs WHERE job_id IN (" + sqlgen.Placeholders(n) +
		") ORDER BY job_id" + lockClause(forUpdate)
}

func lockClause(forUpdate bool) string {
	if forUpdate {
		return " FOR UPDATE"
	}
	return ""
}

// JobList returns a page of jobs ordered by (created_at DESC, job_id DESC), after the cursor.
// Limit is clamped to 1..1000 (default 100).
func (e executor) JobList(ctx context.Context, p store.JobListParams) ([]store.Job, error) {
	var (
		where []string
		args  []any
	)
	if p.Status != "" {
		where, args = append(where, "status = ?"), append(args, p.Status)
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
	jobs, err := e.queryJobs(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// JobUpdate applies one compare-and-set write: a single UPDATE guarded by status (and attempts
// and worker when asked). When no row matches it tells ErrNotFound from ErrConflict with one
// more lookup. A non-nil StartedAt or FinishedAt pointing at the zero time clears the column.
func (e executor) JobUpdate(ctx context.Context, u store.JobUpdate) error {
	return shared.UpdateJob(ctx, e.q, u)
}

// JobUpdateMany applies the compare-and-set writes of distinct jobs with as few UPDATEs as their
// shapes allow (sqlgen.JobUpdates). One write is JobUpdate, with its precise error; for more, a
// statement that matches fewer rows than it carries fails the whole call with ErrConflict, and
// the caller's transaction is rolled back.
func (e executor) JobUpdateMany(ctx context.Context, us []store.JobUpdate) error {
	return shared.UpdateJobs(ctx, e.q, us)
}

// JobListDispatchable returns due, unpublished pending jobs, oldest available first.
func (e executor) JobListDispatchable(ctx context.Context, p store.DispatchParams) ([]store.Job, error) {
	q, args := shared.Dispatchable(p, sqlgen.ClampLimit(p.Limit, dispatchLimitDefault, dispatchLimitMax))
	jobs, err := e.queryJobs(ctx, "SELECT "+jobColumnsNoPayload+q, args...)
	if err != nil {
		return nil, fmt.Errorf("list dispatchable jobs: %w", err)
	}
	return jobs, nil
}

// JobMarkEnqueued sets enqueued=1 and the stream id of every mark that still matches (pending,
// not enqueued, same attempts), in one UPDATE per 500 marks. When an id appears twice in a
// chunk the first mark wins.
func (e executor) JobMarkEnqueued(ctx context.Context, marks []store.JobEnqueued) (int, error) {
	total := 0
	for chunk := range slices.Chunk(asciiMarks(marks), batchChunk) {
		q, args := markEnqueuedStmt(chunk)
		res, err := e.q.ExecContext(ctx, q, args...)
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

// JobMarkPublished implements store.JobExecutor: JobMarkEnqueued's statements as blind writes,
// which a transaction sends with its next statement or its COMMIT.
func (e executor) JobMarkPublished(ctx context.Context, marks []store.JobEnqueued) error {
	for chunk := range slices.Chunk(asciiMarks(marks), batchChunk) {
		q, args := markEnqueuedStmt(chunk)
		if err := e.execBlind(ctx, "mark jobs enqueued", q, args); err != nil {
			return fmt.Errorf("mark jobs enqueued: %w", mapErr(err))
		}
	}
	return nil
}

// asciiMarks drops the marks whose id cannot be a job's (job ids are ASCII).
func asciiMarks(marks []store.JobEnqueued) []store.JobEnqueued {
	return slices.DeleteFunc(slices.Clone(marks), func(m store.JobEnqueued) bool { return !sqlgen.ASCIIID(m.ID) })
}

// markEnqueuedStmt is the UPDATE of one chunk of marks: enqueued=1 and the stream id, where the
// job is still pending, unpublished and at the mark's attempt.
func markEnqueuedStmt(chunk []store.JobEnqueued) (string, []any) {
	var (
		streamCase, attemptsCase strings.Builder
		streamArgs, attemptArgs  []any
		ids                      = make([]any, len(chunk))
	)
	for i, m := range chunk {
		streamCase.WriteString(" WHEN ? THEN ?")
		attemptsCase.WriteString(" WHEN ? THEN ?")
		streamArgs = append(streamArgs, m.ID, m.StreamID)
		attemptArgs = append(attemptArgs, m.ID, m.Attempts)
		ids[i] = m.ID
	}
	q := "UPDATE orchestrator_jobs " + byKey + " SET enqueued = 1, stream_id = CASE job_id" +
		streamCase.String() + " END WHERE job_id IN (" + sqlgen.Placeholders(len(chunk)) +
		") AND status = ? AND enqueued = 0 AND attempts = CASE job_id" +
		attemptsCase.String() + " END"
	return q, slices.Concat(streamArgs, ids, []any{store.JobPending}, attemptArgs)
}

package sqlgen

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the reads of jobs whose SQL both dialects share (store.JobExecutor,
// store.AdmissionExecutor).

// filter is the conditions of a WHERE and their arguments.
type filter struct {
	where []string
	args  []any
}

// add adds cond with its arguments.
func (f *filter) add(cond string, args ...any) {
	f.where, f.args = append(f.where, cond), append(f.args, args...)
}

// addIf adds cond with v when v is not empty.
func (f *filter) addIf(cond, v string) {
	if v != "" {
		f.add(cond, v)
	}
}

// sql is the WHERE clause, empty when there is no condition.
func (f *filter) sql() string {
	if len(f.where) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(f.where, " AND ")
}

// lock is the locking clause of a read that locks its rows when forUpdate.
func (d *Driver) lock(forUpdate bool) string {
	if forUpdate {
		return d.ForUpdate
	}
	return ""
}

// getOne reads the row whose key is id: "SELECT " + from + " = ?", locked when forUpdate
// (Dialect.ForUpdate), scanned with scan; ErrNotFound when there is none. An id that cannot
// exist (not ASCIIID) is not looked up. what names the read in errors.
func getOne[T any](ctx context.Context, e Executor, what, from, id string, forUpdate bool, scan func(Scanner) (T, error)) (T, error) {
	var zero T
	if !ASCIIID(id) {
		return zero, fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	v, err := scan(e.r.QueryRowContext(ctx, "SELECT "+from+" = ?"+e.d.lock(forUpdate), id))
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, e.d.MapErr(err))
	}
	return v, nil
}

// JobGet returns one job or store.ErrNotFound.
func (e Executor) JobGet(ctx context.Context, id string) (store.Job, error) {
	return getOne(ctx, e, "get job "+id, JobColumns+" FROM orchestrator_jobs WHERE job_id", id, false, e.d.ScanJob)
}

// JobGetMany returns the existing jobs among ids, in id order per chunk. With forUpdate the rows
// are locked in that order (Dialect.ForUpdate), which keeps concurrent claimers from
// deadlocking each other.
func (e Executor) JobGetMany(ctx context.Context, ids []string, forUpdate bool) ([]store.Job, error) {
	jobs, err := chunked(DistinctIDs(ids), e.d.Chunk, func(chunk []string) ([]store.Job, error) {
		return e.d.QueryJobs(ctx, e.r, "SELECT "+JobColumns+" FROM orchestrator_jobs WHERE job_id IN ("+
			Placeholders(len(chunk))+") ORDER BY job_id"+e.d.lock(forUpdate), Args(chunk)...)
	})
	if err != nil {
		return nil, fmt.Errorf("get jobs: %w", err)
	}
	return jobs, nil
}

// JobHolders returns the status and worker of the existing jobs among ids, in id order per
// chunk. It reads no payload: a worker asks about every job it runs on each call.
func (e Executor) JobHolders(ctx context.Context, ids []string) ([]store.JobHolder, error) {
	scan := func(row Scanner) (store.JobHolder, error) {
		var h store.JobHolder
		err := row.Scan(&h.ID, &h.Status, &h.WorkerID)
		return h, e.d.MapErr(err)
	}
	out, err := chunked(DistinctIDs(ids), e.d.Chunk, func(chunk []string) ([]store.JobHolder, error) {
		return query(ctx, e.d, e.r, scan, "SELECT job_id, status, worker_id FROM orchestrator_jobs WHERE job_id IN ("+
			Placeholders(len(chunk))+") ORDER BY job_id", Args(chunk)...)
	})
	if err != nil {
		return nil, fmt.Errorf("get job holders: %w", err)
	}
	return out, nil
}

// JobList returns a page of jobs ordered by (created_at DESC, job_id DESC), after the cursor.
// Limit is clamped to 1..1000 (default 100).
func (e Executor) JobList(ctx context.Context, p store.JobListParams) ([]store.Job, error) {
	var f filter
	f.addIf("status = ?", string(p.Status))
	f.addIf("type = ?", p.Type)
	f.addIf("agent = ?", p.Agent)
	return e.newestJobs(ctx, "list jobs", f, p.After, p.Limit)
}

// newestJobs is the page of the jobs f selects after the cursor, newest first: (created_at DESC,
// job_id DESC), of at most limit (clamped to 1..1000, default 100) jobs.
func (e Executor) newestJobs(ctx context.Context, what string, f filter, after *store.JobCursor, limit int) ([]store.Job, error) {
	if after != nil {
		if !ASCIIID(after.ID) {
			return nil, fmt.Errorf("%s: cursor id %q is not ASCII", what, after.ID)
		}
		at := e.d.Time(after.CreatedAt)
		f.add("(created_at < ? OR (created_at = ? AND job_id < ?))", at, at, after.ID)
	}
	q := "SELECT " + JobColumns + " FROM orchestrator_jobs" + f.sql() + " ORDER BY created_at DESC, job_id DESC LIMIT ?"
	jobs, err := e.d.QueryJobs(ctx, e.r, q, append(f.args, ClampLimit(limit, ListLimitDefault, ListLimitMax))...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return jobs, nil
}

// JobListDispatchable returns due, unpublished pending jobs, oldest available first.
func (e Executor) JobListDispatchable(ctx context.Context, p store.DispatchParams) ([]store.Job, error) {
	q, args := e.d.Dispatchable(p, ClampLimit(p.Limit, DispatchLimitDefault, DispatchLimitMax))
	jobs, err := e.d.QueryJobs(ctx, e.r, "SELECT "+JobColumnsNoPayload+q, args...)
	if err != nil {
		return nil, fmt.Errorf("list dispatchable jobs: %w", err)
	}
	return jobs, nil
}

// JobListInFlightByPool returns the claimed and running jobs of a pool, by job_id.
func (e Executor) JobListInFlightByPool(ctx context.Context, poolID string, limit int) ([]store.Job, error) {
	jobs, err := e.d.QueryJobs(ctx, e.r, "SELECT "+JobColumnsNoPayload+` FROM orchestrator_jobs
		WHERE owner_pool = ? AND status IN (?, ?) ORDER BY job_id LIMIT ?`, poolID,
		string(store.JobClaimed), string(store.JobRunning), ClampLimit(limit, ListLimitDefault, DispatchLimitMax))
	if err != nil {
		return nil, fmt.Errorf("list jobs in flight of pool %s: %w", poolID, err)
	}
	return jobs, nil
}

// JobCountUnfinished counts the agent's non-terminal jobs over idx_jobs_agent_status. The
// LIMIT inside the derived table stops the index scan at limit entries, so a cap of 1000 costs
// at most 1000 index reads however many jobs the agent has.
func (e Executor) JobCountUnfinished(ctx context.Context, agent string, limit int) (int, error) {
	statuses := store.UnfinishedJobStatuses()
	args := append([]any{agent}, Args(statuses)...)
	inner := "SELECT 1 FROM orchestrator_jobs WHERE agent = ? AND status IN (" + Placeholders(len(statuses)) + ")"
	if limit > 0 {
		inner += " LIMIT ?"
		args = append(args, limit)
	}
	var n int
	if err := e.r.QueryRowContext(ctx, "SELECT COUNT(*) FROM ("+inner+") AS unfinished", args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count unfinished jobs of agent %s: %w", agent, e.d.MapErr(err))
	}
	return n, nil
}

// JobCountPending counts the pending jobs of each of types over idx_jobs_type_status, less
// those of excludeIDs.
func (e Executor) JobCountPending(ctx context.Context, types, excludeIDs []string) (map[string]int, error) {
	out := make(map[string]int, len(types))
	if len(types) == 0 {
		return out, nil
	}
	args := append([]any{string(store.JobPending)}, Args(types)...)
	q := `SELECT type, COUNT(*) FROM orchestrator_jobs WHERE status = ? AND type IN (` + Placeholders(len(types)) + `)`
	if ids := ASCIIIDs(excludeIDs); len(ids) > 0 {
		q += ` AND job_id NOT IN (` + Placeholders(len(ids)) + `)`
		args = append(args, Args(ids)...)
	}
	return e.countByType(ctx, "count pending jobs", q+` GROUP BY type`, args, out)
}

// JobCountUnplaced counts, by type, the pending jobs that wait for the scheduler: not placed
// and not enqueued (idx_jobs_dispatch).
func (e Executor) JobCountUnplaced(ctx context.Context) (map[string]int, error) {
	return e.countByType(ctx, "count unplaced jobs", `SELECT type, COUNT(*) FROM orchestrator_jobs
		WHERE status = ? AND enqueued = 0 AND `+ScheduledJob+` AND lease_token = '' GROUP BY type`,
		[]any{string(store.JobPending)}, map[string]int{})
}

// countByType runs q, a SELECT of (type, count) rows, into out.
func (e Executor) countByType(ctx context.Context, what, q string, args []any, out map[string]int) (map[string]int, error) {
	rows, err := e.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, e.d.MapErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			typ string
			n   int
		)
		if err := rows.Scan(&typ, &n); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out[typ] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, e.d.MapErr(err))
	}
	return out, nil
}

// TakenJob is what JobInsert returns when the id was taken: the existing job, read on x with a
// shared lock (Dialect.ShareLock), which sees the latest committed row even when the calling
// transaction's snapshot predates it, and inserted=false.
func (d *Driver) TakenJob(ctx context.Context, x Querier, id string) (store.Job, bool, error) {
	existing, err := d.ScanJob(x.QueryRowContext(ctx,
		"SELECT "+JobColumns+" FROM orchestrator_jobs WHERE job_id = ?"+d.ShareLock, id))
	if err != nil {
		return store.Job{}, false, fmt.Errorf("read existing job %s: %w", id, d.MapErr(err))
	}
	return existing, false, nil
}

// JobListSchedulable returns the due, unplaced pending jobs the scheduler places: up to p.Limit
// by priority, up to p.Limit oldest first, and up to p.Limit GPU jobs by priority, each once
// (store.SchedulableParams). The reads walk the pending jobs not enqueued (idx_jobs_dispatch),
// which is where unplaced jobs stay.
func (e Executor) JobListSchedulable(ctx context.Context, p store.SchedulableParams) ([]store.Job, error) {
	limit := ClampLimit(p.Limit, DispatchLimitDefault, DispatchLimitMax)
	q := "SELECT " + JobColumnsNoPayload + ` FROM orchestrator_jobs WHERE status = ? AND enqueued = 0
		AND available_at <= ? AND lease_token = '' AND `
	args := []any{string(store.JobPending), e.d.Time(p.Now)}
	var out []store.Job
	seen := map[string]bool{}
	for _, read := range []struct{ which, order string }{
		{ScheduledJob, "priority DESC, available_at, job_id"},
		{ScheduledJob, "available_at, job_id"},
		// A backlog of jobs without a GPU waiting for worker slots must not hide the GPU jobs
		// behind it: those are read by themselves too.
		{"gpu_memory_mb > 0", "priority DESC, available_at, job_id"},
	} {
		jobs, err := e.d.QueryJobs(ctx, e.r, q+read.which+" ORDER BY "+read.order+" LIMIT ?", append(args, limit)...)
		if err != nil {
			return nil, fmt.Errorf("list schedulable jobs: %w", err)
		}
		for _, j := range jobs {
			if !seen[j.ID] {
				seen[j.ID] = true
				out = append(out, j)
			}
		}
		if len(jobs) < limit {
			break // every such job is in already: the other orders would read the same rows
		}
	}
	return out, nil
}

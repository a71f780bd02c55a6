package mysql

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

// batchChunk bounds the rows or ids one statement carries (IN lists, multi-row inserts).
const batchChunk = 500

// JobInsert inserts a new pending job, or returns the existing job with inserted=false when the
// id is taken. A zero AvailableAt means Now.
func (e executor) JobInsert(ctx context.Context, p store.JobInsertParams) (store.Job, bool, error) {
	if !sqlgen.ASCIIID(p.ID) {
		return store.Job{}, false, fmt.Errorf("insert job %q: a job id must be ASCII", p.ID)
	}
	j := sqlgen.NewJob(p)
	_, err := e.q.ExecContext(ctx, sqlgen.InsertJob+sqlgen.JobRow, shared.JobArgs(j)...)
	if err == nil {
		return j, true, nil
	}
	if err = mapErr(err); !errors.Is(err, store.ErrConflict) {
		return store.Job{}, false, fmt.Errorf("insert job %s: %w", p.ID, err)
	}
	return shared.TakenJob(ctx, e.q, p.ID)
}

// LockJobsAndLeases reads and locks jobs, then leases (store.Tx): one round trip, two result
// sets, when each fits one statement.
func (t *tx) LockJobsAndLeases(ctx context.Context, p store.LockParams) ([]store.Job, []store.Lease, error) {
	ids, tokens, withPayload := sqlgen.DistinctIDs(p.Jobs), sqlgen.DistinctIDs(p.Leases), sqlgen.DistinctIDs(p.Payloads)
	if len(ids) == 0 || len(tokens) == 0 || len(ids) > batchChunk || len(tokens) > batchChunk {
		var jobs []store.Job
		for chunk := range slices.Chunk(ids, batchChunk) {
			q, args := lockJobsByID(chunk, withPayload)
			got, err := shared.QueryJobs(ctx, t.q, q, args...)
			if err != nil {
				return nil, nil, fmt.Errorf("lock jobs: %w", err)
			}
			jobs = append(jobs, got...)
		}
		leases, err := t.LeaseGetMany(ctx, tokens, true)
		return jobs, leases, err
	}
	q, args := lockJobsByID(ids, withPayload)
	rows, err := t.q.QueryContext(ctx, q+"; "+shared.SelectLeases(len(tokens), true), append(args, sqlgen.Args(tokens)...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("lock jobs and leases: %w", mapErr(err))
	}
	defer rows.Close()
	jobs, err := sqlgen.Collect(&shared, rows, shared.ScanJob)
	if err != nil {
		return nil, nil, fmt.Errorf("lock jobs: %w", err)
	}
	if !rows.NextResultSet() {
		return nil, nil, fmt.Errorf("lock leases: %w", mapErr(cmp.Or(rows.Err(), errors.New("no result set"))))
	}
	leases, err := sqlgen.Collect(&shared, rows, shared.ScanLease)
	if err != nil {
		return nil, nil, fmt.Errorf("lock leases: %w", err)
	}
	return jobs, leases, nil
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
	q := "SELECT job_id, type, agent, " + expr + ", " + sqlgen.JobColumnsAfterPayload +
		" FROM orchestrator_jobs WHERE job_id IN (" + sqlgen.Placeholders(len(ids)) + ") ORDER BY job_id FOR UPDATE"
	return q, append(payload, sqlgen.Args(ids)...)
}

// JobMarkEnqueued sets enqueued=1 and the stream id of every mark that still matches (pending,
// not enqueued, same attempts), in one UPDATE per 500 marks. When an id appears twice in a
// chunk the first mark wins.
func (e executor) JobMarkEnqueued(ctx context.Context, marks []store.JobEnqueued) (int, error) {
	total := 0
	for chunk := range slices.Chunk(asciiMarks(marks), batchChunk) {
		q, args := markEnqueuedStmt(chunk)
		n, err := shared.ExecCount(ctx, e.q, "mark jobs enqueued", q, args...)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// JobMarkPublished implements store.JobExecutor: JobMarkEnqueued's statements as blind writes,
// which a transaction sends with its next statement or its COMMIT.
func (e executor) JobMarkPublished(ctx context.Context, marks []store.JobEnqueued) error {
	for chunk := range slices.Chunk(asciiMarks(marks), batchChunk) {
		q, args := markEnqueuedStmt(chunk)
		if err := shared.ExecBlind(ctx, e.q, "mark jobs enqueued", q, args); err != nil {
			return fmt.Errorf("mark jobs enqueued: %w", err)
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

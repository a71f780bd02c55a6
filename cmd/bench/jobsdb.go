package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// jobsDB reads one scenario's job rows (job_id LIKE prefix%) from the orchestrator's database
// (MariaDB, or the embedded mode's SQLite file).
// The database is the truth of the orchestrator, so the bench measures there rather than
// trusting what a client saw: created_at is when the submit committed, started_at when a worker
// reported the handler's start, finished_at when the result committed (all to the microsecond,
// UTC).
type jobsDB struct {
	db      *sql.DB
	jobType string
	// sqlite says db is the embedded mode's SQLite database, whose times are INTEGER
	// microseconds since the epoch and whose index hints are spelled INDEXED BY.
	sqlite bool
	// noHint is set once the index hint of terminalCounts failed (the index was renamed).
	noHint *atomic.Bool
}

// micros is the SQL of column col, a time, as microseconds since the epoch: what SQLite keeps,
// and MariaDB's DATETIME(6) (UTC) counted from 1970 (NULL stays NULL).
func (j jobsDB) micros(col string) string {
	if j.sqlite {
		return col
	}
	return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ")"
}

// indexHint makes a query on orchestrator_jobs read index name.
func (j jobsDB) indexHint(name string) string {
	if j.sqlite {
		return "INDEXED BY " + name
	}
	return "FORCE INDEX (" + name + ")"
}

// like is the LIKE of a likePrefix pattern: SQLite has no default escape character.
func (j jobsDB) like() string {
	if j.sqlite {
		return `LIKE ? ESCAPE '\'`
	}
	return "LIKE ?"
}

// microsTime is the time of a micros column; the zero time for NULL.
func microsTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}

// typeStatusIndex is the (type, status) index of orchestrator_jobs. With the primary key
// appended it orders (type, status, job_id), so a count of one scenario's terminal jobs reads
// exactly those entries; the optimizer picks it only for the type column unless told.
const typeStatusIndex = "idx_jobs_type_status"

// likePrefix returns the LIKE pattern of the ids starting with prefix.
func likePrefix(prefix string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(prefix) + "%"
}

// terminalCounts counts the scenario's jobs in terminal statuses. It is the poll of the wait
// for completion (waitDone), so it is kept cheap: the (type, status) index with the primary key
// appended covers it, and only terminal rows are read; still, it reads every one of them.
func (j jobsDB) terminalCounts(ctx context.Context, prefix string) (map[string]int, error) {
	const q = `SELECT status, COUNT(*) FROM orchestrator_jobs %s
		WHERE type = ? AND status IN ('done', 'dead_letter', 'cancelled') AND job_id %s
		GROUP BY status`
	if !j.noHint.Load() {
		out, err := j.counts(ctx, fmt.Sprintf(q, j.indexHint(typeStatusIndex), j.like()), j.jobType, likePrefix(prefix))
		if err == nil || ctx.Err() != nil {
			return out, err
		}
		j.noHint.Store(true)
		progress("poll: the index hint failed (%v); counting without it", err)
	}
	return j.counts(ctx, fmt.Sprintf(q, "", j.like()), j.jobType, likePrefix(prefix))
}

// unfinished counts the jobs of the whole database that are not in a terminal status, but for
// those of parkedType, which no worker runs (the (type, status) index answers it without
// reading rows).
func (j jobsDB) unfinished(ctx context.Context) (int, error) {
	var n int
	err := j.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orchestrator_jobs
		WHERE status IN ('pending', 'claimed', 'running', 'failed') AND type <> ?`, parkedType).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unfinished jobs: %w", err)
	}
	return n, nil
}

// pending counts the pending jobs of the job type, over the (type, status) index: the backlog
// of the type's queue.
func (j jobsDB) pending(ctx context.Context) (int, error) {
	var n int
	err := j.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orchestrator_jobs WHERE type = ? AND status = 'pending'`,
		j.jobType).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count pending jobs: %w", err)
	}
	return n, nil
}

// unpublished counts the pending jobs that are not marked enqueued yet: the outbox the
// dispatcher still has to go through (the status-first dispatch index answers it).
func (j jobsDB) unpublished(ctx context.Context) (int, error) {
	var n int
	err := j.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orchestrator_jobs WHERE status = 'pending' AND enqueued = 0`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unpublished jobs: %w", err)
	}
	return n, nil
}

// statusCounts counts the scenario's jobs by status.
func (j jobsDB) statusCounts(ctx context.Context, prefix string) (map[string]int, error) {
	return j.counts(ctx, `SELECT status, COUNT(*) FROM orchestrator_jobs WHERE job_id `+j.like()+` GROUP BY status`,
		likePrefix(prefix))
}

func (j jobsDB) counts(ctx context.Context, q string, args ...any) (map[string]int, error) {
	rows, err := j.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var status string
		var n int
		if err := rows.Scan(&status, &n); err != nil {
			return nil, fmt.Errorf("count jobs: %w", err)
		}
		out[status] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	return out, nil
}

// doneWindow is the time span of a scenario's done jobs, from the database's timestamps.
type doneWindow struct {
	Jobs          int
	FirstCreated  time.Time
	FirstStarted  time.Time
	FirstFinished time.Time
	LastFinished  time.Time
}

// window returns the span of the scenario's done jobs; Jobs is 0 (and the times zero) when
// none is done.
func (j jobsDB) window(ctx context.Context, prefix string) (doneWindow, error) {
	var w doneWindow
	var fc, fs, ff, lf sql.NullInt64
	err := j.db.QueryRowContext(ctx, `SELECT COUNT(*), MIN(`+j.micros("created_at")+`), MIN(`+j.micros("started_at")+`),
		MIN(`+j.micros("finished_at")+`), MAX(`+j.micros("finished_at")+`)
		FROM orchestrator_jobs WHERE job_id `+j.like()+` AND status = 'done'`, likePrefix(prefix)).
		Scan(&w.Jobs, &fc, &fs, &ff, &lf)
	if err != nil {
		return w, fmt.Errorf("read done window: %w", err)
	}
	w.FirstCreated, w.FirstStarted = microsTime(fc), microsTime(fs)
	w.FirstFinished, w.LastFinished = microsTime(ff), microsTime(lf)
	return w, nil
}

// latencies returns, for every done job of the scenario, submit → handler start
// (started_at − created_at) and submit → done (finished_at − created_at).
func (j jobsDB) latencies(ctx context.Context, prefix string) (start, done []time.Duration, err error) {
	rows, err := j.db.QueryContext(ctx, `SELECT `+j.micros("created_at")+`, `+j.micros("started_at")+`, `+
		j.micros("finished_at")+` FROM orchestrator_jobs WHERE job_id `+j.like()+` AND status = 'done'`, likePrefix(prefix))
	if err != nil {
		return nil, nil, fmt.Errorf("read latencies: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var created int64
		var started, finished sql.NullInt64
		if err := rows.Scan(&created, &started, &finished); err != nil {
			return nil, nil, fmt.Errorf("read latencies: %w", err)
		}
		if started.Valid {
			start = append(start, time.Duration(started.Int64-created)*time.Microsecond)
		}
		if finished.Valid {
			done = append(done, time.Duration(finished.Int64-created)*time.Microsecond)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read latencies: %w", err)
	}
	return start, done, nil
}

// sum adds the values of counts.
func sum(counts map[string]int) int {
	n := 0
	for _, v := range counts {
		n += v
	}
	return n
}

package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

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
	j.Payload = nilIfEmpty(payload)
	j.Result = nilIfEmpty(resultRaw)
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

// jsonArg passes JSON as a string (a []byte would be sent as _binary'...'), nil as NULL.
func jsonArg(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

func nilIfEmpty(raw []byte) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	return raw
}

// asciiID reports whether id can be a job id: job_id is an ascii_bin column, and comparing it
// with a non-ASCII string is a collation error in MariaDB, not a mismatch. Such ids therefore
// never exist; lookups report them as not found without asking the server.
func asciiID(id string) bool {
	for i := 0; i < len(id); i++ {
		if id[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func clampLimit(limit, def, maxLimit int) int {
	if limit <= 0 {
		return def
	}
	return min(limit, maxLimit)
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func anySlice[T any](s []T) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// encoding is how this driver passes values to the shared statements of sqlgen.
var encoding = sqlgen.Encoding{Time: func(t time.Time) any { return dbTime(t) }}

// execAll runs statements that must each match all their rows; one that matches fewer fails
// with ErrConflict (a row moved on since the caller read it).
func execAll(ctx context.Context, q querier, what string, stmts []sqlgen.Statement) error {
	for _, st := range stmts {
		res, err := q.ExecContext(ctx, st.SQL, st.Args...)
		if err != nil {
			return fmt.Errorf("%s: %w", what, mapErr(err))
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if int(n) != st.Rows {
			return fmt.Errorf("%s: %d of %d rows still matched: %w", what, n, st.Rows, store.ErrConflict)
		}
	}
	return nil
}

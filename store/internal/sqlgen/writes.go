package sqlgen

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpuorch/orchestrator/store"
)

// Execer is what *sql.DB and *sql.Tx have in common for writes.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Querier is an Execer that also reads one row: what a single-row compare-and-set needs to tell
// a missing row from one that moved on.
type Querier interface {
	Execer
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Deferrer is a Querier that may hold a compare-and-set write and check it later, with its next
// statement (store.Tx.DeferChecks): DeferWrite reports whether it took the write, which must
// match exactly rows rows.
type Deferrer interface {
	DeferWrite(what, query string, args []any, rows int) bool
}

// Driver is one driver's side of the batch writes the drivers share: how it encodes values,
// how it maps its errors onto the store's, and how many rows one statement carries.
type Driver struct {
	Encoding
	// MapErr turns a driver error into store.ErrConflict, store.ErrNotFound or itself.
	MapErr func(error) error
	// Chunk bounds the rows of one statement.
	Chunk int
}

// ASCIIID reports whether id can be a job id or a token: job_id is an ascii_bin column, and
// comparing it with a non-ASCII string is a collation error in MariaDB, not a mismatch. Such ids
// never exist; lookups report them as not found without asking the server.
func ASCIIID(id string) bool {
	for i := 0; i < len(id); i++ {
		if id[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// DistinctIDs returns the ids (or tokens) that can exist, not empty and ASCIIID, sorted, each
// once: the order in which a batch reads and locks rows.
func DistinctIDs(ids []string) []string {
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "" || !ASCIIID(id) })
	slices.Sort(ids)
	return slices.Compact(ids)
}

// NewJob is the row a new pending job is inserted as: times in UTC, to the microsecond (what
// both schemas keep), AvailableAt Now when zero.
func NewJob(p store.JobInsertParams) store.Job {
	now := p.Now.UTC().Truncate(time.Microsecond)
	avail := now
	if !p.AvailableAt.IsZero() {
		avail = p.AvailableAt.UTC().Truncate(time.Microsecond)
	}
	var payload []byte
	if len(p.Payload) > 0 {
		payload = p.Payload
	}
	return store.Job{
		ID: p.ID, Type: p.Type, Agent: p.Agent, Payload: payload,
		Status: store.JobPending, MaxAttempts: p.MaxAttempts, AvailableAt: avail,
		GPUMemoryMB: p.GPUMemoryMB, Timeout: p.Timeout.Truncate(time.Millisecond),
		CreatedAt: now, UpdatedAt: now,
	}
}

// InsertJobs inserts new pending jobs with one multi-row INSERT per chunk, all or none (see
// store.JobExecutor.JobInsertMany), and returns the rows as stored.
func (d Driver) InsertJobs(ctx context.Context, x Execer, ps []store.JobInsertParams) ([]store.Job, error) {
	jobs := make([]store.Job, 0, len(ps))
	for chunk := range slices.Chunk(ps, max(d.Chunk, 1)) {
		var q strings.Builder
		q.WriteString(`INSERT INTO orchestrator_jobs (job_id, type, agent, payload, status, attempts,
			max_attempts, available_at, enqueued, gpu_memory_mb, timeout_ms, created_at, updated_at) VALUES `)
		args := make([]any, 0, 11*len(chunk))
		for i, p := range chunk {
			if !ASCIIID(p.ID) {
				return nil, fmt.Errorf("insert job %q: a job id must be ASCII", p.ID)
			}
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, 0, ?, ?, 0, ?, ?, ?, ?)")
			j := NewJob(p)
			jobs = append(jobs, j)
			var payload any // JSON as a string (MariaDB would take []byte as _binary), nil as NULL
			if j.Payload != nil {
				payload = string(j.Payload)
			}
			args = append(args, j.ID, j.Type, j.Agent, payload, string(j.Status), j.MaxAttempts,
				d.Time(j.AvailableAt), j.GPUMemoryMB, j.Timeout.Milliseconds(), d.Time(j.CreatedAt), d.Time(j.CreatedAt))
		}
		if _, err := x.ExecContext(ctx, q.String(), args...); err != nil {
			return nil, fmt.Errorf("insert %d jobs: %w", len(chunk), d.MapErr(err))
		}
	}
	return jobs, nil
}

// UpdateJob applies one compare-and-set write of a job (store.JobExecutor.JobUpdate).
func (d Driver) UpdateJob(ctx context.Context, x Querier, u store.JobUpdate) error {
	if err := checkJobUpdate(u); err != nil {
		return err
	}
	return d.CompareAndSet(ctx, x, fmt.Sprintf("update job %s from %s to %s", u.ID, u.From, u.To),
		JobUpdate(u, d.Encoding), "SELECT 1 FROM orchestrator_jobs WHERE job_id = ?", u.ID)
}

// UpdateJobs applies compare-and-set writes of distinct jobs with JobUpdates. One write goes
// through UpdateJob, which tells a missing job from a conflict.
func (d Driver) UpdateJobs(ctx context.Context, x Querier, us []store.JobUpdate) error {
	if len(us) == 1 {
		return d.UpdateJob(ctx, x, us[0])
	}
	for _, u := range us {
		if err := checkJobUpdate(u); err != nil {
			return err
		}
	}
	stmts, err := JobUpdates(us, d.Encoding, d.Chunk)
	if err != nil {
		return err
	}
	return d.execAll(ctx, x, "update jobs", stmts)
}

func checkJobUpdate(u store.JobUpdate) error {
	if u.To == "" {
		return fmt.Errorf("update job %s: no target status", u.ID)
	}
	if !ASCIIID(u.ID) {
		return fmt.Errorf("update job %q: %w", u.ID, store.ErrNotFound)
	}
	return nil
}

// SetLeaseStatus applies one compare-and-set of a lease's status
// (store.LeaseExecutor.LeaseSetStatus).
func (d Driver) SetLeaseStatus(ctx context.Context, x Querier, u store.LeaseStatusUpdate) error {
	if !ASCIIID(u.Token) {
		return fmt.Errorf("set lease status: %w", store.ErrNotFound)
	}
	stmts, err := LeaseStatuses([]store.LeaseStatusUpdate{u}, d.Encoding, 1)
	if err != nil {
		return err
	}
	return d.CompareAndSet(ctx, x, fmt.Sprintf("set lease status %s -> %s", u.From, u.To),
		stmts[0], "SELECT 1 FROM orchestrator_leases WHERE token = ?", u.Token)
}

// SetLeaseStatuses applies compare-and-set status changes of distinct leases with
// LeaseStatuses. One change goes through SetLeaseStatus, which tells a missing lease from a
// conflict.
func (d Driver) SetLeaseStatuses(ctx context.Context, x Querier, us []store.LeaseStatusUpdate) error {
	if len(us) == 1 {
		return d.SetLeaseStatus(ctx, x, us[0])
	}
	for _, u := range us {
		if !ASCIIID(u.Token) {
			return fmt.Errorf("set lease status: %w", store.ErrNotFound)
		}
	}
	stmts, err := LeaseStatuses(us, d.Encoding, d.Chunk)
	if err != nil {
		return err
	}
	return d.execAll(ctx, x, "set lease statuses", stmts)
}

// CompareAndSet runs a single-row compare-and-set UPDATE and tells its outcomes apart: nil when
// it matched (matched rows, so identical values still count), store.ErrConflict when the row
// exists but no longer matched, store.ErrNotFound when exists (a query of key) finds no row.
// A Deferrer may take it to check later, when a mismatch is only ErrConflict.
func (d Driver) CompareAndSet(ctx context.Context, x Querier, what string, st Statement, exists string, key any) error {
	if dx, ok := x.(Deferrer); ok && dx.DeferWrite(what, st.SQL, st.Args, 1) {
		return nil
	}
	res, err := x.ExecContext(ctx, st.SQL, st.Args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, d.MapErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	} else if n > 0 {
		return nil
	}
	var one int
	if err := x.QueryRowContext(ctx, exists, key).Scan(&one); err != nil {
		return fmt.Errorf("%s: %w", what, d.MapErr(err))
	}
	return fmt.Errorf("%s: %w", what, store.ErrConflict)
}

// execAll runs statements that must each match all their rows; one that matches fewer fails
// with ErrConflict (a row moved on since the caller read it). A Deferrer may take them to
// check later.
func (d Driver) execAll(ctx context.Context, x Execer, what string, stmts []Statement) error {
	dx, _ := x.(Deferrer)
	for _, st := range stmts {
		if dx != nil && dx.DeferWrite(what, st.SQL, st.Args, st.Rows) {
			continue
		}
		res, err := x.ExecContext(ctx, st.SQL, st.Args...)
		if err != nil {
			return fmt.Errorf("%s: %w", what, d.MapErr(err))
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

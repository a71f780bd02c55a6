package sqlgen

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpuorch/orchestrator/store"
)

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

// NewJob is the row a new job is inserted as: pending unless p names a status, times in UTC, to
// the microsecond (what both schemas keep), AvailableAt Now when zero.
func NewJob(p store.JobInsertParams) store.Job {
	now := Micro(p.Now)
	avail := now
	if !p.AvailableAt.IsZero() {
		avail = Micro(p.AvailableAt)
	}
	var payload []byte
	if len(p.Payload) > 0 {
		payload = p.Payload
	}
	return store.Job{
		ID: p.ID, Type: p.Type, Agent: p.Agent, Payload: payload,
		Status: cmp.Or(p.Status, store.JobPending), MaxAttempts: p.MaxAttempts, AvailableAt: avail,
		GPUMemoryMB: p.GPUMemoryMB, GPUs: p.GPUs, GPUExclusive: p.GPUExclusive, Priority: p.Priority,
		Constraints: p.Constraints, PoolID: p.PoolID, ModelID: p.ModelID,
		Timeout:   p.Timeout.Truncate(time.Millisecond),
		CreatedAt: now, UpdatedAt: now, CallbackURL: p.CallbackURL,
	}
}

// InsertJob is the INSERT of new pending jobs up to VALUES, whose rows are JobRow each; JobArgs
// are a row's arguments.
const (
	InsertJob = `INSERT INTO orchestrator_jobs (job_id, type, agent, payload, status, attempts,
		max_attempts, available_at, enqueued, gpu_memory_mb, gpus, gpu_exclusive, priority, constraints,
		pool_id, model_id, timeout_ms, created_at, updated_at, callback_url) VALUES `
	JobRow = "(?, ?, ?, ?, ?, 0, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

// JobArgs are the arguments of j's JobRow.
func (enc Encoding) JobArgs(j store.Job) []any {
	return []any{j.ID, j.Type, j.Agent, JSONArg(j.Payload), string(j.Status), j.MaxAttempts,
		enc.Time(j.AvailableAt), j.GPUMemoryMB, j.GPUs, j.GPUExclusive, j.Priority, constraintsArg(j.Constraints),
		j.PoolID, j.ModelID, j.Timeout.Milliseconds(), enc.Time(j.CreatedAt), enc.Time(j.CreatedAt), j.CallbackURL}
}

// constraintsArg is the constraints column of a job: NULL when it has none.
func constraintsArg(c *store.Constraints) any {
	if c.Empty() {
		return nil
	}
	raw, _ := json.Marshal(c) // maps and slices of strings, and an int: it cannot fail
	return string(raw)
}

// JobInsertMany inserts new pending jobs with one multi-row INSERT per chunk, all or none: when
// any id is taken (or appears twice) it fails with ErrConflict and inserts nothing of that
// statement, and the caller rolls back. It returns the rows as stored. A Holder (a MariaDB
// transaction) sends the INSERTs with its next statement or with COMMIT (a submit's insert,
// audit rows and COMMIT are one round trip); a taken id then fails that statement.
func (e Executor) JobInsertMany(ctx context.Context, ps []store.JobInsertParams) ([]store.Job, error) {
	jobs := make([]store.Job, 0, len(ps))
	for chunk := range slices.Chunk(ps, max(e.d.Chunk, 1)) {
		var q strings.Builder
		q.WriteString(InsertJob)
		args := make([]any, 0, 11*len(chunk))
		for i, p := range chunk {
			if !ASCIIID(p.ID) {
				return nil, fmt.Errorf("insert job %q: a job id must be ASCII", p.ID)
			}
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString(JobRow)
			j := NewJob(p)
			jobs = append(jobs, j)
			args = append(args, e.d.JobArgs(j)...)
		}
		if err := e.d.ExecBlind(ctx, e.w, "insert jobs", q.String(), args); err != nil {
			return nil, fmt.Errorf("insert %d jobs: %w", len(chunk), err)
		}
	}
	return jobs, nil
}

// JobUpdate applies one compare-and-set write: a single UPDATE guarded by status (and attempts
// and worker when asked). When no row matches it tells ErrNotFound from ErrConflict with one
// more lookup. A non-nil StartedAt or FinishedAt pointing at the zero time clears the column.
func (e Executor) JobUpdate(ctx context.Context, u store.JobUpdate) error {
	if err := checkJobUpdate(u); err != nil {
		return err
	}
	return e.compareAndSet(ctx, fmt.Sprintf("update job %s from %s to %s", u.ID, u.From, u.To),
		JobUpdate(u, e.d.Encoding), "SELECT 1 FROM orchestrator_jobs WHERE job_id = ?", u.ID)
}

// JobUpdateMany applies the compare-and-set writes of distinct jobs with as few UPDATEs as their
// shapes allow (JobUpdates). One write is JobUpdate, with its precise error; for more, a
// statement that matches fewer rows than it carries fails the whole call with ErrConflict, and
// the caller's transaction is rolled back.
func (e Executor) JobUpdateMany(ctx context.Context, us []store.JobUpdate) error {
	if len(us) == 1 {
		return e.JobUpdate(ctx, us[0])
	}
	for _, u := range us {
		if err := checkJobUpdate(u); err != nil {
			return err
		}
	}
	stmts, err := JobUpdates(us, e.d.Encoding, e.d.Chunk)
	if err != nil {
		return err
	}
	return e.execAll(ctx, "update jobs", stmts)
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

// LeaseSetStatus is one compare-and-set UPDATE guarded by the current status; a final status
// also sets ended_at.
func (e Executor) LeaseSetStatus(ctx context.Context, u store.LeaseStatusUpdate) error {
	if !ASCIIID(u.Token) {
		return fmt.Errorf("set lease status: %w", store.ErrNotFound)
	}
	stmts, err := LeaseStatuses([]store.LeaseStatusUpdate{u}, e.d.Encoding, 1)
	if err != nil {
		return err
	}
	return e.compareAndSet(ctx, fmt.Sprintf("set lease status %s -> %s", u.From, u.To),
		stmts[0], "SELECT 1 FROM orchestrator_leases WHERE token = ?", u.Token)
}

// LeaseSetStatusMany applies the compare-and-set status changes of distinct leases, one UPDATE
// per (from, to) and chunk of tokens (LeaseStatuses); a lease that moved on fails the whole
// call with ErrConflict. One change is LeaseSetStatus, which tells a missing lease from a
// conflict.
func (e Executor) LeaseSetStatusMany(ctx context.Context, us []store.LeaseStatusUpdate) error {
	if len(us) == 1 {
		return e.LeaseSetStatus(ctx, us[0])
	}
	for _, u := range us {
		if !ASCIIID(u.Token) {
			return fmt.Errorf("set lease status: %w", store.ErrNotFound)
		}
	}
	stmts, err := LeaseStatuses(us, e.d.Encoding, e.d.Chunk)
	if err != nil {
		return err
	}
	return e.execAll(ctx, "set lease statuses", stmts)
}

// compareAndSet runs a single-row compare-and-set UPDATE and tells its outcomes apart: nil when
// it matched (matched rows, so identical values still count), store.ErrConflict when the row
// exists but no longer matched, store.ErrNotFound when exists (a query of key) finds no row.
// A Deferrer may take it to check later, when a mismatch is only ErrConflict.
func (e Executor) compareAndSet(ctx context.Context, what string, st Statement, exists string, key any) error {
	if dx, ok := e.w.(Deferrer); ok && dx.DeferWrite(what, st.SQL, st.Args, 1) {
		return nil
	}
	res, err := e.w.ExecContext(ctx, st.SQL, st.Args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, e.d.MapErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	} else if n > 0 {
		return nil
	}
	var one int
	if err := e.w.QueryRowContext(ctx, exists, key).Scan(&one); err != nil {
		return fmt.Errorf("%s: %w", what, e.d.MapErr(err))
	}
	return fmt.Errorf("%s: %w", what, store.ErrConflict)
}

// execAll runs statements that must each match all their rows; one that matches fewer fails
// with ErrConflict (a row moved on since the caller read it). A Deferrer may take them to
// check later.
func (e Executor) execAll(ctx context.Context, what string, stmts []Statement) error {
	dx, _ := e.w.(Deferrer)
	for _, st := range stmts {
		if dx != nil && dx.DeferWrite(what, st.SQL, st.Args, st.Rows) {
			continue
		}
		res, err := e.w.ExecContext(ctx, st.SQL, st.Args...)
		if err != nil {
			return fmt.Errorf("%s: %w", what, e.d.MapErr(err))
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

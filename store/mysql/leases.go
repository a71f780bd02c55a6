package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

const leaseColumns = `token, agent_name, job_id, node_id, gpu_index, mode, memory_mb, exclusive,
	ttl_ms, status, created_at, expires_at, last_heartbeat, ended_at, metadata`

// LeaseInsert inserts the leases with one multi-row INSERT per 500 rows. A token that exists
// already is store.ErrConflict: at once outside a transaction; in one, the INSERT goes out with
// the next statement (execBlind), which then fails with it.
func (e executor) LeaseInsert(ctx context.Context, leases []store.Lease) error {
	for chunk := range slices.Chunk(leases, batchChunk) {
		var q strings.Builder
		q.WriteString("INSERT INTO orchestrator_leases (" + leaseColumns + ") VALUES ")
		args := make([]any, 0, 15*len(chunk))
		for i, l := range chunk {
			if !sqlgen.ASCIIID(l.Token) || !sqlgen.ASCIIID(l.JobID) {
				return fmt.Errorf("insert leases: token %q or job id %q is not ASCII", l.Token, l.JobID)
			}
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			var gpu any
			if l.GPUIndex != nil {
				gpu = *l.GPUIndex
			}
			var ended any
			if l.EndedAt != nil {
				ended = dbTime(*l.EndedAt)
			}
			args = append(args, l.Token, l.Agent, sqlgen.NullString(l.JobID), l.NodeID, gpu, string(l.Mode),
				l.MemoryMB, l.Exclusive, l.TTL.Milliseconds(), string(l.Status), dbTime(l.CreatedAt),
				dbTime(l.ExpiresAt), dbTime(l.LastHeartbeat), ended, sqlgen.JSONArg(l.Metadata))
		}
		if err := e.execBlind(ctx, "insert leases", q.String(), args); err != nil {
			return fmt.Errorf("insert %d leases: %w", len(chunk), mapErr(err))
		}
	}
	return nil
}

// LeaseGet returns one lease or store.ErrNotFound.
func (e executor) LeaseGet(ctx context.Context, token string, forUpdate bool) (store.Lease, error) {
	if !sqlgen.ASCIIID(token) {
		return store.Lease{}, fmt.Errorf("get lease: %w", store.ErrNotFound)
	}
	q := "SELECT " + leaseColumns + " FROM orchestrator_leases WHERE token = ?"
	if forUpdate {
		q += " FOR UPDATE"
	}
	l, err := scanLease(e.q.QueryRowContext(ctx, q, token))
	if err != nil {
		return store.Lease{}, fmt.Errorf("get lease: %w", mapErr(err))
	}
	return l, nil
}

// LeaseGetMany returns the existing leases among tokens; with forUpdate they are locked in
// token order, which keeps concurrent callers from deadlocking each other.
func (e executor) LeaseGetMany(ctx context.Context, tokens []string, forUpdate bool) ([]store.Lease, error) {
	tokens = sqlgen.DistinctIDs(tokens)
	var out []store.Lease
	for chunk := range slices.Chunk(tokens, batchChunk) {
		got, err := e.queryLeases(ctx, selectLeasesByToken(len(chunk), forUpdate), sqlgen.Args(chunk)...)
		if err != nil {
			return nil, fmt.Errorf("get leases: %w", err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// selectLeasesByToken reads n leases by token in token order, locking them when forUpdate.
func selectLeasesByToken(n int, forUpdate bool) string {
	return "SELECT " + leaseColumns + " FROM orchestrator_leases WHERE token IN (" + sqlgen.Placeholders(n) +
		") ORDER BY token" + lockClause(forUpdate)
}

// LockJobsAndLeases reads and locks jobs, then leases (store.Tx): one round trip, two result
// sets, when each fits one statement.
func (t *tx) LockJobsAndLeases(ctx context.Context, p store.LockParams) ([]store.Job, []store.Lease, error) {
	ids, tokens, withPayload := sqlgen.DistinctIDs(p.Jobs), sqlgen.DistinctIDs(p.Leases), sqlgen.DistinctIDs(p.Payloads)
	if len(ids) == 0 || len(tokens) == 0 || len(ids) > batchChunk || len(tokens) > batchChunk {
		var jobs []store.Job
		for chunk := range slices.Chunk(ids, batchChunk) {
			q, args := lockJobsByID(chunk, withPayload)
			got, err := t.queryJobs(ctx, q, args...)
			if err != nil {
				return nil, nil, fmt.Errorf("lock jobs: %w", err)
			}
			jobs = append(jobs, got...)
		}
		leases, err := t.LeaseGetMany(ctx, tokens, true)
		return jobs, leases, err
	}
	q, args := lockJobsByID(ids, withPayload)
	rows, err := t.q.QueryContext(ctx, q+"; "+selectLeasesByToken(len(tokens), true), append(args, sqlgen.Args(tokens)...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("lock jobs and leases: %w", mapErr(err))
	}
	defer rows.Close()
	jobs, err := scanRows(rows, scanJob)
	if err != nil {
		return nil, nil, fmt.Errorf("lock jobs: %w", err)
	}
	if !rows.NextResultSet() {
		return nil, nil, fmt.Errorf("lock leases: %w", mapErr(cmp.Or(rows.Err(), errors.New("no result set"))))
	}
	leases, err := scanRows(rows, scanLease)
	if err != nil {
		return nil, nil, fmt.Errorf("lock leases: %w", err)
	}
	return jobs, leases, nil
}

// LeaseList returns leases newest first. Limit is clamped to 1..1000 (default 100).
func (e executor) LeaseList(ctx context.Context, p store.LeaseListParams) ([]store.Lease, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		where, args = append(where, cond), append(args, v)
	}
	if p.Status != "" {
		add("status = ?", string(p.Status))
	}
	if p.Agent != "" {
		add("agent_name = ?", p.Agent)
	}
	if p.NodeID != "" {
		add("node_id = ?", p.NodeID)
	}
	if p.JobID != "" {
		if !sqlgen.ASCIIID(p.JobID) {
			return nil, nil
		}
		add("job_id = ?", p.JobID)
	}
	q := "SELECT " + leaseColumns + " FROM orchestrator_leases"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, token DESC LIMIT ?"
	args = append(args, sqlgen.ClampLimit(p.Limit, listLimitDefault, listLimitMax))
	leases, err := e.queryLeases(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return leases, nil
}

// LeaseSetStatus is one compare-and-set UPDATE guarded by the current status; a final status
// also sets ended_at.
func (e executor) LeaseSetStatus(ctx context.Context, u store.LeaseStatusUpdate) error {
	return shared.SetLeaseStatus(ctx, e.q, u)
}

// LeaseSetStatusMany applies the compare-and-set status changes of distinct leases, one UPDATE
// per (from, to) and 500 tokens; a lease that moved on fails the whole call with ErrConflict.
func (e executor) LeaseSetStatusMany(ctx context.Context, us []store.LeaseStatusUpdate) error {
	return shared.SetLeaseStatuses(ctx, e.q, us)
}

// LeaseHeartbeat extends the active, unexpired leases among tokens by their own TTL in one
// UPDATE per 500 tokens, then reads the rows back.
func (e executor) LeaseHeartbeat(ctx context.Context, tokens []string, now time.Time) ([]store.Lease, error) {
	tokens = slices.DeleteFunc(slices.Clone(tokens), func(t string) bool { return t == "" || !sqlgen.ASCIIID(t) })
	if len(tokens) == 0 {
		return nil, nil
	}
	slices.Sort(tokens)
	tokens = slices.Compact(tokens)
	at := dbTime(now)
	for chunk := range slices.Chunk(tokens, batchChunk) {
		args := []any{at, at}
		args = append(args, sqlgen.Args(chunk)...)
		args = append(args, string(store.LeaseActive), at)
		_, err := e.q.ExecContext(ctx, `UPDATE orchestrator_leases `+byKey+`
			SET expires_at = ? + INTERVAL ttl_ms * 1000 MICROSECOND, last_heartbeat = ?
			WHERE token IN (`+sqlgen.Placeholders(len(chunk))+`) AND status = ? AND expires_at > ?`, args...)
		if err != nil {
			return nil, fmt.Errorf("heartbeat leases: %w", mapErr(err))
		}
	}
	leases, err := e.LeaseGetMany(ctx, tokens, false)
	if err != nil {
		return nil, fmt.Errorf("heartbeat leases: %w", err)
	}
	return leases, nil
}

// LeaseListExpired returns active leases past their expiry, oldest expiry first. Limit is
// clamped to 1..10000 (default 100).
func (e executor) LeaseListExpired(ctx context.Context, now time.Time, limit int) ([]store.Lease, error) {
	leases, err := e.queryLeases(ctx, "SELECT "+leaseColumns+` FROM orchestrator_leases
		WHERE status = ? AND expires_at <= ? ORDER BY expires_at, token LIMIT ?`,
		string(store.LeaseActive), dbTime(now), sqlgen.ClampLimit(limit, dispatchLimitDefault, dispatchLimitMax))
	if err != nil {
		return nil, fmt.Errorf("list expired leases: %w", err)
	}
	return leases, nil
}

// queryLeases runs a SELECT of leaseColumns and scans every row.
func (e executor) queryLeases(ctx context.Context, q string, args ...any) ([]store.Lease, error) {
	rows, err := e.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	return scanRows(rows, scanLease)
}

func scanLease(row scanner) (store.Lease, error) {
	var (
		l            store.Lease
		jobID        sql.NullString
		gpu          sql.NullInt64
		mode, status string
		ttlMS        int64
		ended        sql.NullTime
		metadata     []byte
	)
	err := row.Scan(&l.Token, &l.Agent, &jobID, &l.NodeID, &gpu, &mode, &l.MemoryMB, &l.Exclusive,
		&ttlMS, &status, &l.CreatedAt, &l.ExpiresAt, &l.LastHeartbeat, &ended, &metadata)
	if err != nil {
		return store.Lease{}, err
	}
	l.JobID = jobID.String
	if gpu.Valid {
		i := int(gpu.Int64)
		l.GPUIndex = &i
	}
	l.Mode, l.Status = store.LeaseMode(mode), store.LeaseStatus(status)
	l.TTL = time.Duration(ttlMS) * time.Millisecond
	if ended.Valid {
		l.EndedAt = &ended.Time
	}
	l.Metadata = sqlgen.NilIfEmpty(metadata)
	return l, nil
}

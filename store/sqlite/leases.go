package sqlite

import (
	"context"
	"database/sql"
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
// already is store.ErrConflict.
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
				ended = nullTime(*l.EndedAt)
			}
			args = append(args, l.Token, l.Agent, sqlgen.NullString(l.JobID), l.NodeID, gpu, string(l.Mode),
				l.MemoryMB, l.Exclusive, l.TTL.Milliseconds(), string(l.Status), dbTime(l.CreatedAt),
				dbTime(l.ExpiresAt), dbTime(l.LastHeartbeat), ended, sqlgen.JSONArg(l.Metadata))
		}
		if _, err := e.w.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("insert %d leases: %w", len(chunk), mapErr(err))
		}
	}
	return nil
}

// LeaseGet returns one lease or store.ErrNotFound. forUpdate needs no lock (see JobGetMany).
func (e executor) LeaseGet(ctx context.Context, token string, _ bool) (store.Lease, error) {
	if !sqlgen.ASCIIID(token) {
		return store.Lease{}, fmt.Errorf("get lease: %w", store.ErrNotFound)
	}
	l, err := scanLease(e.r.QueryRowContext(ctx,
		"SELECT "+leaseColumns+" FROM orchestrator_leases WHERE token = ?", token))
	if err != nil {
		return store.Lease{}, fmt.Errorf("get lease: %w", mapErr(err))
	}
	return l, nil
}

// LeaseGetMany returns the existing leases among tokens, in token order per chunk. forUpdate
// needs no lock (see JobGetMany).
func (e executor) LeaseGetMany(ctx context.Context, tokens []string, _ bool) ([]store.Lease, error) {
	tokens = sqlgen.DistinctIDs(tokens)
	if len(tokens) == 0 {
		return nil, nil
	}
	var out []store.Lease
	for chunk := range slices.Chunk(tokens, batchChunk) {
		got, err := queryLeases(ctx, e.r, "SELECT "+leaseColumns+" FROM orchestrator_leases WHERE token IN ("+
			sqlgen.Placeholders(len(chunk))+") ORDER BY token", sqlgen.Args(chunk)...)
		if err != nil {
			return nil, fmt.Errorf("get leases: %w", err)
		}
		out = append(out, got...)
	}
	return out, nil
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
	leases, err := queryLeases(ctx, e.r, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return leases, nil
}

// LeaseSetStatus is one compare-and-set UPDATE guarded by the current status; a final status
// also sets ended_at.
func (e executor) LeaseSetStatus(ctx context.Context, u store.LeaseStatusUpdate) error {
	return shared.SetLeaseStatus(ctx, e.w, u)
}

// LeaseSetStatusMany applies the compare-and-set status changes of distinct leases, one UPDATE
// per (from, to) and 500 tokens; a lease that moved on fails the whole call with ErrConflict.
func (e executor) LeaseSetStatusMany(ctx context.Context, us []store.LeaseStatusUpdate) error {
	return shared.SetLeaseStatuses(ctx, e.w, us)
}

// LeaseHeartbeat extends the active, unexpired leases among tokens by their own TTL in one
// UPDATE per 500 tokens (times are microseconds, so now + TTL is arithmetic), then reads the
// rows back.
func (e executor) LeaseHeartbeat(ctx context.Context, tokens []string, now time.Time) ([]store.Lease, error) {
	tokens = sqlgen.DistinctIDs(tokens)
	if len(tokens) == 0 {
		return nil, nil
	}
	at := dbTime(now)
	for chunk := range slices.Chunk(tokens, batchChunk) {
		args := slices.Concat([]any{at, at}, sqlgen.Args(chunk), []any{string(store.LeaseActive), at})
		_, err := e.w.ExecContext(ctx, `UPDATE orchestrator_leases
			SET expires_at = ? + ttl_ms * 1000, last_heartbeat = ?
			WHERE token IN (`+sqlgen.Placeholders(len(chunk))+`) AND status = ? AND expires_at > ?`, args...)
		if err != nil {
			return nil, fmt.Errorf("heartbeat leases: %w", mapErr(err))
		}
	}
	// Read back through the same connection, so that a heartbeat outside a transaction
	// reports what it wrote even if a reader's snapshot were older.
	var out []store.Lease
	for chunk := range slices.Chunk(tokens, batchChunk) {
		got, err := queryLeases(ctx, e.w, "SELECT "+leaseColumns+" FROM orchestrator_leases WHERE token IN ("+
			sqlgen.Placeholders(len(chunk))+") ORDER BY token", sqlgen.Args(chunk)...)
		if err != nil {
			return nil, fmt.Errorf("heartbeat leases: %w", err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// LeaseListExpired returns active leases past their expiry, oldest expiry first. Limit is
// clamped to 1..10000 (default 100).
func (e executor) LeaseListExpired(ctx context.Context, now time.Time, limit int) ([]store.Lease, error) {
	leases, err := queryLeases(ctx, e.r, "SELECT "+leaseColumns+` FROM orchestrator_leases
		WHERE status = ? AND expires_at <= ? ORDER BY expires_at, token LIMIT ?`,
		string(store.LeaseActive), dbTime(now), sqlgen.ClampLimit(limit, dispatchLimitDefault, dispatchLimitMax))
	if err != nil {
		return nil, fmt.Errorf("list expired leases: %w", err)
	}
	return leases, nil
}

// queryLeases runs a SELECT of leaseColumns and scans every row.
func queryLeases(ctx context.Context, q querier, query string, args ...any) ([]store.Lease, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

func scanLease(row scanner) (store.Lease, error) {
	var (
		l                                  store.Lease
		jobID                              sql.NullString
		gpu                                sql.NullInt64
		mode, status                       string
		ttlMS                              int64
		created, expires, heartbeat, ended dbTimeScan
		metadata                           []byte
	)
	err := row.Scan(&l.Token, &l.Agent, &jobID, &l.NodeID, &gpu, &mode, &l.MemoryMB, &l.Exclusive,
		&ttlMS, &status, &created, &expires, &heartbeat, &ended, &metadata)
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
	l.CreatedAt, l.ExpiresAt, l.LastHeartbeat = created.t, expires.t, heartbeat.t
	l.EndedAt = ended.ptr()
	l.Metadata = sqlgen.NilIfEmpty(metadata)
	return l, nil
}

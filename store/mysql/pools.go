package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

const poolColumns = `pool_id, agent_name, model_id, adapter, variant, job_types, desired_workers,
	spawned_workers, status, status_reason, status_changed_at, hold_seconds, created_at, updated_at,
	started_at, last_heartbeat, last_activity_at, metadata`

// PoolInsert inserts a new pool; an existing pool_id is store.ErrConflict.
func (e executor) PoolInsert(ctx context.Context, p store.Pool) error {
	if !sqlgen.ASCIIID(p.ID) {
		return fmt.Errorf("insert pool: pool id %q is not ASCII", p.ID)
	}
	_, err := e.q.ExecContext(ctx, "INSERT INTO worker_pools ("+poolColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		p.ID, p.Agent, p.ModelID, p.Adapter, p.Variant, sqlgen.TypesJSON(p.Types), p.DesiredWorkers,
		p.SpawnedWorkers, string(p.Status), p.StatusReason, dbTime(p.StatusChangedAt), p.HoldSeconds,
		dbTime(p.CreatedAt), dbTime(p.UpdatedAt), dbTime(p.StartedAt), nullTimePtr(p.LastHeartbeat),
		nullTimePtr(p.LastActivityAt), sqlgen.JSONArg(p.Metadata))
	if err != nil {
		return fmt.Errorf("insert pool %s: %w", p.ID, mapErr(err))
	}
	return nil
}

// PoolGet returns one pool or store.ErrNotFound.
func (e executor) PoolGet(ctx context.Context, id string, forUpdate bool) (store.Pool, error) {
	if !sqlgen.ASCIIID(id) {
		return store.Pool{}, fmt.Errorf("get pool %s: %w", id, store.ErrNotFound)
	}
	q := "SELECT " + poolColumns + " FROM worker_pools WHERE pool_id = ?"
	if forUpdate {
		q += " FOR UPDATE"
	}
	p, err := scanPool(e.q.QueryRowContext(ctx, q, id))
	if err != nil {
		return store.Pool{}, fmt.Errorf("get pool %s: %w", id, mapErr(err))
	}
	return p, nil
}

// PoolList returns the pools with one of statuses (all when none), by pool_id.
func (e executor) PoolList(ctx context.Context, statuses ...store.PoolStatus) ([]store.Pool, error) {
	q := "SELECT " + poolColumns + " FROM worker_pools"
	if len(statuses) > 0 {
		q += " WHERE status IN (" + sqlgen.Placeholders(len(statuses)) + ")"
	}
	rows, err := e.q.QueryContext(ctx, q+" ORDER BY pool_id", statusArgs(statuses)...)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", mapErr(err))
	}
	defer rows.Close()
	var out []store.Pool
	for rows.Next() {
		p, err := scanPool(rows)
		if err != nil {
			return nil, fmt.Errorf("list pools: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pools: %w", mapErr(err))
	}
	return out, nil
}

// PoolUpdate is one UPDATE guarded by the current status.
func (e executor) PoolUpdate(ctx context.Context, u store.PoolUpdate) error {
	return shared.PoolUpdate(ctx, e.q, u)
}

// PoolTouch moves last_heartbeat or last_activity_at forward to now.
func (e executor) PoolTouch(ctx context.Context, id string, heartbeat bool, now time.Time) error {
	if !sqlgen.ASCIIID(id) {
		return fmt.Errorf("touch pool %s: %w", id, store.ErrNotFound)
	}
	col := "last_activity_at"
	if heartbeat {
		col = "last_heartbeat"
	}
	at := dbTime(now)
	res, err := e.q.ExecContext(ctx, "UPDATE worker_pools SET "+col+" = GREATEST(COALESCE("+col+
		", ?), ?) WHERE pool_id = ?", at, at, id)
	if err != nil {
		return fmt.Errorf("touch pool %s: %w", id, mapErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("touch pool %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("touch pool %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// JobListInFlightByPool returns the claimed and running jobs of a pool, by job_id.
func (e executor) JobListInFlightByPool(ctx context.Context, poolID string, limit int) ([]store.Job, error) {
	jobs, err := e.queryJobs(ctx, "SELECT "+jobColumnsNoPayload+` FROM orchestrator_jobs
		WHERE owner_pool = ? AND status IN (?, ?) ORDER BY job_id LIMIT ?`, poolID,
		string(store.JobClaimed), string(store.JobRunning), sqlgen.ClampLimit(limit, listLimitDefault, dispatchLimitMax))
	if err != nil {
		return nil, fmt.Errorf("list jobs in flight of pool %s: %w", poolID, err)
	}
	return jobs, nil
}

func scanPool(row scanner) (store.Pool, error) {
	var (
		p                 store.Pool
		types, meta       []byte
		status            string
		heartbeat, active sql.NullTime
	)
	err := row.Scan(&p.ID, &p.Agent, &p.ModelID, &p.Adapter, &p.Variant, &types, &p.DesiredWorkers,
		&p.SpawnedWorkers, &status, &p.StatusReason, &p.StatusChangedAt, &p.HoldSeconds, &p.CreatedAt,
		&p.UpdatedAt, &p.StartedAt, &heartbeat, &active, &meta)
	if err != nil {
		return store.Pool{}, err
	}
	p.Status = store.PoolStatus(status)
	if p.Types, err = sqlgen.ParseTypes(types); err != nil {
		return store.Pool{}, fmt.Errorf("pool %s: %w", p.ID, err)
	}
	p.LastHeartbeat, p.LastActivityAt = timePtr(heartbeat), timePtr(active)
	p.Metadata = sqlgen.NilIfEmpty(meta)
	return p, nil
}

func nullTimePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return nullTime(*t)
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	return &v
}

func statusArgs(statuses []store.PoolStatus) []any {
	out := make([]any, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}

package sqlgen

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of pools that both dialects share (store.PoolExecutor).

// statusReasonMax is the byte capacity of worker_pools.status_reason: a longer reason is
// stored cut rather than failing the write.
const statusReasonMax = 255

// PoolInsert inserts a new pool; an existing pool_id is store.ErrConflict.
func (e Executor) PoolInsert(ctx context.Context, p store.Pool) error {
	if !ASCIIID(p.ID) {
		return fmt.Errorf("insert pool: pool id %q is not ASCII", p.ID)
	}
	_, err := e.w.ExecContext(ctx, "INSERT INTO worker_pools ("+poolColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		p.ID, p.Agent, p.ModelID, p.Adapter, p.Variant, TypesJSON(p.Types), p.DesiredWorkers,
		p.SpawnedWorkers, string(p.Status), TruncateUTF8(p.StatusReason, statusReasonMax), e.d.Time(p.StatusChangedAt),
		p.HoldSeconds, e.d.Time(p.CreatedAt), e.d.Time(p.UpdatedAt), e.d.Time(p.StartedAt),
		e.d.nullTimePtr(p.LastHeartbeat), e.d.nullTimePtr(p.LastActivityAt), JSONArg(p.Metadata))
	if err != nil {
		return fmt.Errorf("insert pool %s: %w", p.ID, e.d.MapErr(err))
	}
	return nil
}

// PoolGet returns one pool or store.ErrNotFound, locked when forUpdate (Dialect.ForUpdate).
func (e Executor) PoolGet(ctx context.Context, id string, forUpdate bool) (store.Pool, error) {
	return getOne(ctx, e, "get pool "+id, poolColumns+" FROM worker_pools WHERE pool_id", id, forUpdate, e.d.scanPool)
}

// PoolList returns the pools with one of statuses (all when none), by pool_id.
func (e Executor) PoolList(ctx context.Context, statuses ...store.PoolStatus) ([]store.Pool, error) {
	q := "SELECT " + poolColumns + " FROM worker_pools"
	if len(statuses) > 0 {
		q += " WHERE status IN (" + Placeholders(len(statuses)) + ")"
	}
	args := make([]any, len(statuses))
	for i, s := range statuses {
		args[i] = string(s)
	}
	pools, err := query(ctx, e.d, e.r, e.d.scanPool, q+" ORDER BY pool_id", args...)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return pools, nil
}

// PoolUpdate is one UPDATE of a pool guarded by its current status.
func (e Executor) PoolUpdate(ctx context.Context, u store.PoolUpdate) error {
	if !ASCIIID(u.ID) {
		return fmt.Errorf("update pool %s: %w", u.ID, store.ErrNotFound)
	}
	now := e.d.Time(u.Now)
	sets := []string{"status = ?", "updated_at = ?"}
	args := []any{string(u.To), now}
	set := func(col string, v any) { sets, args = append(sets, col+" = ?"), append(args, v) }
	if u.To != u.From {
		set("status_changed_at", now)
	}
	if u.StatusReason != nil {
		set("status_reason", TruncateUTF8(*u.StatusReason, statusReasonMax))
	}
	if s := u.Spec; s != nil {
		set("agent_name", s.Agent)
		set("model_id", s.ModelID)
		set("adapter", s.Adapter)
		set("variant", s.Variant)
		set("job_types", TypesJSON(s.Types))
		set("desired_workers", s.DesiredWorkers)
		set("hold_seconds", s.HoldSeconds)
		set("metadata", JSONArg(s.Metadata))
	}
	if u.SpawnedWorkers != nil {
		set("spawned_workers", *u.SpawnedWorkers)
	}
	if u.StartedAt != nil {
		set("started_at", e.d.Time(*u.StartedAt))
	}
	args = append(args, u.ID, string(u.From))
	what := fmt.Sprintf("update pool %s from %s to %s", u.ID, u.From, u.To)
	return e.compareAndSet(ctx, what, Statement{SQL: "UPDATE worker_pools SET " +
		strings.Join(sets, ", ") + " WHERE pool_id = ? AND status = ?", Args: args},
		"SELECT 1 FROM worker_pools WHERE pool_id = ?", u.ID)
}

// PoolTouch moves last_heartbeat or last_activity_at forward to now (Dialect.Greatest).
func (e Executor) PoolTouch(ctx context.Context, id string, heartbeat bool, now time.Time) error {
	what := "touch pool " + id
	if !ASCIIID(id) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	col := "last_activity_at"
	if heartbeat {
		col = "last_heartbeat"
	}
	at := e.d.Time(now)
	return e.execFound(ctx, what, "UPDATE worker_pools SET "+col+" = "+e.d.Greatest+"(COALESCE("+col+
		", ?), ?) WHERE pool_id = ?", at, at, id)
}

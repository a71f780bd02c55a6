package sqlgen

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of workers that both dialects share (store.WorkerExecutor).

// workerKeys and workerUpdated are the key and the other columns of workerColumns.
var (
	workerKeys    = []string{"worker_id"}
	workerUpdated = []string{"pool_id", "node_id", "hostname", "pid", "job_types", "concurrency", "status",
		"instruction", "in_flight", "jobs_claimed", "telemetry", "registered_at", "last_heartbeat", "last_active_at", "warm_model"}
)

// WorkerUpsert inserts a worker or replaces every column of the existing row (Dialect.Upsert).
func (e Executor) WorkerUpsert(ctx context.Context, w store.Worker) error {
	if !ASCIIID(w.ID) || !ASCIIID(w.PoolID) {
		return fmt.Errorf("register worker: worker id %q or pool id %q is not ASCII", w.ID, w.PoolID)
	}
	_, err := e.w.ExecContext(ctx, "INSERT INTO workers ("+workerColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) `+e.d.Upsert(workerKeys, workerUpdated),
		w.ID, w.PoolID, w.NodeID, TruncateUTF8(w.Hostname, 255), w.PID, TypesJSON(w.Types), w.Concurrency,
		string(w.Status), string(w.Instruction), w.InFlight, w.JobsClaimed, JSONArg(w.Telemetry),
		e.d.Time(w.RegisteredAt), e.d.Time(w.LastHeartbeat), e.d.nullTimePtr(w.LastActiveAt), w.WarmModel)
	if err != nil {
		return fmt.Errorf("register worker %s: %w", w.ID, e.d.MapErr(err))
	}
	return nil
}

// WorkerGet returns one worker or store.ErrNotFound, locked when forUpdate
// (Dialect.ForUpdate).
func (e Executor) WorkerGet(ctx context.Context, id string, forUpdate bool) (store.Worker, error) {
	return getOne(ctx, e, "get worker "+id, workerColumns+" FROM workers WHERE worker_id", id, forUpdate, e.d.scanWorker)
}

// WorkerList returns the workers of one pool (or all), by worker_id.
func (e Executor) WorkerList(ctx context.Context, poolID string, all bool) ([]store.Worker, error) {
	q, args := "SELECT "+workerColumns+" FROM workers", []any{}
	if !all {
		if !ASCIIID(poolID) {
			return nil, nil
		}
		q, args = q+" WHERE pool_id = ?", append(args, poolID)
	}
	ws, err := query(ctx, e.d, e.r, e.d.scanWorker, q+" ORDER BY worker_id", args...)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return ws, nil
}

// WorkerUpdate writes the given columns of one worker.
func (e Executor) WorkerUpdate(ctx context.Context, u store.WorkerUpdate) error {
	what := "update worker " + u.ID
	if !ASCIIID(u.ID) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	var (
		sets []string
		args []any
	)
	set := func(col string, v any) { sets, args = append(sets, col+" = ?"), append(args, v) }
	if u.Status != nil {
		set("status", string(*u.Status))
	}
	if u.Instruction != nil {
		set("instruction", string(*u.Instruction))
	}
	if u.InFlight != nil {
		set("in_flight", *u.InFlight)
	}
	if u.JobsClaimed != nil {
		set("jobs_claimed", *u.JobsClaimed)
	}
	if u.Telemetry != nil {
		set("telemetry", JSONArg(u.Telemetry))
	}
	if u.LastHeartbeat != nil {
		set("last_heartbeat", e.d.Time(*u.LastHeartbeat))
	}
	if u.LastActiveAt != nil {
		set("last_active_at", e.d.Time(*u.LastActiveAt))
	}
	if len(sets) == 0 {
		sets = append(sets, "worker_id = worker_id")
	}
	return e.execFound(ctx, what, "UPDATE workers SET "+strings.Join(sets, ", ")+" WHERE worker_id = ?",
		append(args, u.ID)...)
}

// WorkerDelete deletes one worker's row.
func (e Executor) WorkerDelete(ctx context.Context, id string) error {
	what := "deregister worker " + id
	if !ASCIIID(id) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return e.execFound(ctx, what, "DELETE FROM workers WHERE worker_id = ?", id)
}

// WorkerDeleteOffline deletes old offline workers, oldest heartbeat first (Dialect.DeleteFirst).
func (e Executor) WorkerDeleteOffline(ctx context.Context, before time.Time, limit int) (int, error) {
	return e.d.ExecCount(ctx, e.w, "forget offline workers", e.d.DeleteFirst("workers", "worker_id",
		"WHERE status = ? AND last_heartbeat < ? ORDER BY last_heartbeat LIMIT ?"),
		string(store.WorkerOffline), e.d.Time(before), ClampLimit(limit, ListLimitDefault, ListLimitMax))
}

// StaleWorkers is the condition on the workers that WorkerMarkOffline marks offline, with its
// arguments; ok is false when p names no worker that can exist.
func (d *Driver) StaleWorkers(p store.WorkerOfflineParams) (where string, args []any, ok bool) {
	ids := ASCIIIDs(p.IDs)
	if len(ids) == 0 {
		return "", nil, false
	}
	return "status <> ? AND last_heartbeat < ? AND worker_id IN (" + Placeholders(len(ids)) + ")",
		append([]any{string(store.WorkerOffline), d.Time(p.HeartbeatBefore)}, Args(ids)...), true
}

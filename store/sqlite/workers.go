package sqlite

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

const workerColumns = `worker_id, pool_id, node_id, hostname, pid, job_types, concurrency, status,
	instruction, in_flight, jobs_claimed, telemetry, registered_at, last_heartbeat, last_active_at`

// WorkerUpsert inserts a worker or replaces every column of the existing row.
func (e executor) WorkerUpsert(ctx context.Context, w store.Worker) error {
	if !sqlgen.ASCIIID(w.ID) || !sqlgen.ASCIIID(w.PoolID) {
		return fmt.Errorf("register worker: worker id %q or pool id %q is not ASCII", w.ID, w.PoolID)
	}
	_, err := e.w.ExecContext(ctx, "INSERT INTO workers ("+workerColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (worker_id) DO UPDATE SET pool_id = excluded.pool_id, node_id = excluded.node_id,
			hostname = excluded.hostname, pid = excluded.pid, job_types = excluded.job_types,
			concurrency = excluded.concurrency, status = excluded.status,
			instruction = excluded.instruction, in_flight = excluded.in_flight,
			jobs_claimed = excluded.jobs_claimed, telemetry = excluded.telemetry,
			registered_at = excluded.registered_at, last_heartbeat = excluded.last_heartbeat,
			last_active_at = excluded.last_active_at`,
		w.ID, w.PoolID, w.NodeID, sqlgen.TruncateUTF8(w.Hostname, 255), w.PID, sqlgen.TypesJSON(w.Types), w.Concurrency,
		string(w.Status), string(w.Instruction), w.InFlight, w.JobsClaimed, sqlgen.JSONArg(w.Telemetry),
		dbTime(w.RegisteredAt), dbTime(w.LastHeartbeat), nullTimePtr(w.LastActiveAt))
	if err != nil {
		return fmt.Errorf("register worker %s: %w", w.ID, mapErr(err))
	}
	return nil
}

// WorkerGet returns one worker or store.ErrNotFound. forUpdate needs no lock (see JobGetMany).
func (e executor) WorkerGet(ctx context.Context, id string, _ bool) (store.Worker, error) {
	if !sqlgen.ASCIIID(id) {
		return store.Worker{}, fmt.Errorf("get worker %s: %w", id, store.ErrNotFound)
	}
	w, err := scanWorker(e.r.QueryRowContext(ctx, "SELECT "+workerColumns+" FROM workers WHERE worker_id = ?", id))
	if err != nil {
		return store.Worker{}, fmt.Errorf("get worker %s: %w", id, mapErr(err))
	}
	return w, nil
}

// WorkerList returns the workers of one pool (or all), by worker_id.
func (e executor) WorkerList(ctx context.Context, poolID string, all bool) ([]store.Worker, error) {
	q, args := "SELECT "+workerColumns+" FROM workers", []any{}
	if !all {
		if !sqlgen.ASCIIID(poolID) {
			return nil, nil
		}
		q, args = q+" WHERE pool_id = ?", append(args, poolID)
	}
	rows, err := e.r.QueryContext(ctx, q+" ORDER BY worker_id", args...)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", mapErr(err))
	}
	defer rows.Close()
	var out []store.Worker
	for rows.Next() {
		w, err := scanWorker(rows)
		if err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list workers: %w", mapErr(err))
	}
	return out, nil
}

// WorkerUpdate writes the given columns of one worker.
func (e executor) WorkerUpdate(ctx context.Context, u store.WorkerUpdate) error {
	return shared.WorkerUpdate(ctx, e.w, u)
}

// WorkerMarkOffline marks the matching workers offline in one UPDATE … RETURNING.
func (e executor) WorkerMarkOffline(ctx context.Context, p store.WorkerOfflineParams) ([]string, error) {
	p.IDs = slices.DeleteFunc(slices.Clone(p.IDs), func(id string) bool { return !sqlgen.ASCIIID(id) })
	if len(p.IDs) == 0 {
		return nil, nil
	}
	cond := "status <> ? AND last_heartbeat < ?"
	args := []any{string(store.WorkerOffline), string(store.WorkerOffline), dbTime(p.HeartbeatBefore)}
	cond += " AND worker_id IN (" + sqlgen.Placeholders(len(p.IDs)) + ")"
	args = append(args, sqlgen.Args(p.IDs)...)
	rows, err := e.w.QueryContext(ctx, "UPDATE workers SET status = ?, in_flight = 0 WHERE "+cond+
		" RETURNING worker_id", args...)
	if err != nil {
		return nil, fmt.Errorf("mark workers offline: %w", mapErr(err))
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("mark workers offline: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mark workers offline: %w", mapErr(err))
	}
	slices.Sort(ids)
	return ids, nil
}

// WorkerDelete deletes one worker's row.
func (e executor) WorkerDelete(ctx context.Context, id string) error {
	if !sqlgen.ASCIIID(id) {
		return fmt.Errorf("deregister worker %s: %w", id, store.ErrNotFound)
	}
	res, err := e.w.ExecContext(ctx, "DELETE FROM workers WHERE worker_id = ?", id)
	if err != nil {
		return fmt.Errorf("deregister worker %s: %w", id, mapErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("deregister worker %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("deregister worker %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// WorkerDeleteOffline deletes old offline workers, oldest heartbeat first.
func (e executor) WorkerDeleteOffline(ctx context.Context, before time.Time, limit int) (int, error) {
	return e.execCount(ctx, "forget offline workers", `DELETE FROM workers WHERE worker_id IN (SELECT worker_id FROM workers
		WHERE status = ? AND last_heartbeat < ? ORDER BY last_heartbeat LIMIT ?)`,
		string(store.WorkerOffline), dbTime(before), sqlgen.ClampLimit(limit, listLimitDefault, listLimitMax))
}

func scanWorker(row scanner) (store.Worker, error) {
	var (
		w                           store.Worker
		types, telemetry            []byte
		status, instruction         string
		registered, heartbeat, last dbTimeScan
	)
	err := row.Scan(&w.ID, &w.PoolID, &w.NodeID, &w.Hostname, &w.PID, &types, &w.Concurrency, &status,
		&instruction, &w.InFlight, &w.JobsClaimed, &telemetry, &registered, &heartbeat, &last)
	if err != nil {
		return store.Worker{}, err
	}
	w.Status, w.Instruction = store.WorkerStatus(status), store.WorkerInstruction(instruction)
	if w.Types, err = sqlgen.ParseTypes(types); err != nil {
		return store.Worker{}, fmt.Errorf("worker %s: %w", w.ID, err)
	}
	w.Telemetry = sqlgen.NilIfEmpty(telemetry)
	w.RegisteredAt, w.LastHeartbeat, w.LastActiveAt = registered.t, heartbeat.t, last.ptr()
	return w, nil
}

package mysql

import (
	"context"
	"database/sql"
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
	_, err := e.q.ExecContext(ctx, "INSERT INTO workers ("+workerColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE pool_id = VALUES(pool_id), node_id = VALUES(node_id),
			hostname = VALUES(hostname), pid = VALUES(pid), job_types = VALUES(job_types),
			concurrency = VALUES(concurrency), status = VALUES(status),
			instruction = VALUES(instruction), in_flight = VALUES(in_flight),
			jobs_claimed = VALUES(jobs_claimed), telemetry = VALUES(telemetry),
			registered_at = VALUES(registered_at), last_heartbeat = VALUES(last_heartbeat),
			last_active_at = VALUES(last_active_at)`,
		w.ID, w.PoolID, w.NodeID, sqlgen.TruncateUTF8(w.Hostname, 255), w.PID, sqlgen.TypesJSON(w.Types), w.Concurrency,
		string(w.Status), string(w.Instruction), w.InFlight, w.JobsClaimed, sqlgen.JSONArg(w.Telemetry),
		dbTime(w.RegisteredAt), dbTime(w.LastHeartbeat), nullTimePtr(w.LastActiveAt))
	if err != nil {
		return fmt.Errorf("register worker %s: %w", w.ID, mapErr(err))
	}
	return nil
}

// WorkerGet returns one worker or store.ErrNotFound.
func (e executor) WorkerGet(ctx context.Context, id string, forUpdate bool) (store.Worker, error) {
	if !sqlgen.ASCIIID(id) {
		return store.Worker{}, fmt.Errorf("get worker %s: %w", id, store.ErrNotFound)
	}
	q := "SELECT " + workerColumns + " FROM workers WHERE worker_id = ?"
	if forUpdate {
		q += " FOR UPDATE"
	}
	w, err := scanWorker(e.q.QueryRowContext(ctx, q, id))
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
	ws, err := e.queryWorkers(ctx, q+" ORDER BY worker_id", args...)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return ws, nil
}

// WorkerUpdate writes the given columns of one worker.
func (e executor) WorkerUpdate(ctx context.Context, u store.WorkerUpdate) error {
	return shared.WorkerUpdate(ctx, e.q, u)
}

// WorkerMarkOffline locks the matching workers in worker_id order, then marks them offline.
func (e executor) WorkerMarkOffline(ctx context.Context, p store.WorkerOfflineParams) ([]string, error) {
	p.IDs = slices.DeleteFunc(slices.Clone(p.IDs), func(id string) bool { return !sqlgen.ASCIIID(id) })
	if len(p.IDs) == 0 {
		return nil, nil
	}
	cond, args := "status <> ? AND last_heartbeat < ?", []any{string(store.WorkerOffline), dbTime(p.HeartbeatBefore)}
	cond += " AND worker_id IN (" + sqlgen.Placeholders(len(p.IDs)) + ")"
	args = append(args, sqlgen.Args(p.IDs)...)
	rows, err := e.q.QueryContext(ctx, "SELECT worker_id FROM workers WHERE "+cond+" ORDER BY worker_id FOR UPDATE", args...)
	if err != nil {
		return nil, fmt.Errorf("mark workers offline: %w", mapErr(err))
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("mark workers offline: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mark workers offline: %w", mapErr(err))
	}
	for chunk := range slices.Chunk(ids, batchChunk) {
		_, err := e.q.ExecContext(ctx, "UPDATE workers SET status = ?, in_flight = 0 WHERE worker_id IN ("+
			sqlgen.Placeholders(len(chunk))+")", append([]any{string(store.WorkerOffline)}, sqlgen.Args(chunk)...)...)
		if err != nil {
			return nil, fmt.Errorf("mark workers offline: %w", mapErr(err))
		}
	}
	return ids, nil
}

// WorkerDelete deletes one worker's row.
func (e executor) WorkerDelete(ctx context.Context, id string) error {
	if !sqlgen.ASCIIID(id) {
		return fmt.Errorf("deregister worker %s: %w", id, store.ErrNotFound)
	}
	res, err := e.q.ExecContext(ctx, "DELETE FROM workers WHERE worker_id = ?", id)
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
	return e.execCount(ctx, "forget offline workers", `DELETE FROM workers WHERE status = ? AND last_heartbeat < ?
		ORDER BY last_heartbeat LIMIT ?`, string(store.WorkerOffline), dbTime(before),
		sqlgen.ClampLimit(limit, listLimitDefault, listLimitMax))
}

func (e executor) queryWorkers(ctx context.Context, q string, args ...any) ([]store.Worker, error) {
	rows, err := e.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	var out []store.Worker
	for rows.Next() {
		w, err := scanWorker(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

func scanWorker(row scanner) (store.Worker, error) {
	var (
		w                   store.Worker
		types, telemetry    []byte
		status, instruction string
		active              sql.NullTime
	)
	err := row.Scan(&w.ID, &w.PoolID, &w.NodeID, &w.Hostname, &w.PID, &types, &w.Concurrency, &status,
		&instruction, &w.InFlight, &w.JobsClaimed, &telemetry, &w.RegisteredAt, &w.LastHeartbeat, &active)
	if err != nil {
		return store.Worker{}, err
	}
	w.Status, w.Instruction = store.WorkerStatus(status), store.WorkerInstruction(instruction)
	if w.Types, err = sqlgen.ParseTypes(types); err != nil {
		return store.Worker{}, fmt.Errorf("worker %s: %w", w.ID, err)
	}
	w.Telemetry = sqlgen.NilIfEmpty(telemetry)
	w.LastActiveAt = timePtr(active)
	return w, nil
}

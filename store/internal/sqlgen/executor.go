package sqlgen

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the executor methods whose SQL both dialects share: each driver's method
// passes its connection (or transaction) and returns what these return.

// Reader is what *sql.DB and *sql.Tx have in common for reads of many rows.
type Reader interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ExecCount runs a write on x and returns how many rows it changed; what names it in errors.
func (d Driver) ExecCount(ctx context.Context, x Execer, what, q string, args ...any) (int, error) {
	res, err := x.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, d.MapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return int(n), nil
}

// LeaseCountActive counts the active leases of each mode (store.StatsReader); it reads index
// idx_leases_status_expires only.
func (d Driver) LeaseCountActive(ctx context.Context, x Reader) (map[store.LeaseMode]int64, error) {
	rows, err := x.QueryContext(ctx,
		"SELECT mode, COUNT(*) FROM orchestrator_leases WHERE status = ? GROUP BY mode", string(store.LeaseActive))
	if err != nil {
		return nil, fmt.Errorf("count active leases: %w", d.MapErr(err))
	}
	defer rows.Close()
	out := map[store.LeaseMode]int64{}
	for rows.Next() {
		var (
			mode string
			n    int64
		)
		if err := rows.Scan(&mode, &n); err != nil {
			return nil, fmt.Errorf("count active leases: %w", err)
		}
		out[store.LeaseMode(mode)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count active leases: %w", d.MapErr(err))
	}
	return out, nil
}

// JobCountPending counts the pending jobs of each of types over idx_jobs_type_status, less
// those of excludeIDs (store.AdmissionExecutor).
func (d Driver) JobCountPending(ctx context.Context, x Reader, types, excludeIDs []string) (map[string]int, error) {
	out := make(map[string]int, len(types))
	if len(types) == 0 {
		return out, nil
	}
	args := append([]any{string(store.JobPending)}, Args(types)...)
	q := `SELECT type, COUNT(*) FROM orchestrator_jobs WHERE status = ? AND type IN (` + Placeholders(len(types)) + `)`
	if ids := ASCIIIDs(excludeIDs); len(ids) > 0 {
		q += ` AND job_id NOT IN (` + Placeholders(len(ids)) + `)`
		args = append(args, Args(ids)...)
	}
	rows, err := x.QueryContext(ctx, q+` GROUP BY type`, args...)
	if err != nil {
		return nil, fmt.Errorf("count pending jobs: %w", d.MapErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			typ string
			n   int
		)
		if err := rows.Scan(&typ, &n); err != nil {
			return nil, fmt.Errorf("count pending jobs: %w", err)
		}
		out[typ] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count pending jobs: %w", d.MapErr(err))
	}
	return out, nil
}

// PoolUpdate is one UPDATE of a pool guarded by its current status (store.PoolExecutor).
func (d Driver) PoolUpdate(ctx context.Context, x Querier, u store.PoolUpdate) error {
	if !ASCIIID(u.ID) {
		return fmt.Errorf("update pool %s: %w", u.ID, store.ErrNotFound)
	}
	now := d.Time(u.Now)
	sets := []string{"status = ?", "updated_at = ?"}
	args := []any{string(u.To), now}
	set := func(col string, v any) { sets, args = append(sets, col+" = ?"), append(args, v) }
	if u.To != u.From {
		set("status_changed_at", now)
	}
	if u.StatusReason != nil {
		set("status_reason", TruncateUTF8(*u.StatusReason, 255))
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
		set("started_at", d.Time(*u.StartedAt))
	}
	args = append(args, u.ID, string(u.From))
	what := fmt.Sprintf("update pool %s from %s to %s", u.ID, u.From, u.To)
	return d.CompareAndSet(ctx, x, what, Statement{SQL: "UPDATE worker_pools SET " +
		strings.Join(sets, ", ") + " WHERE pool_id = ? AND status = ?", Args: args},
		"SELECT 1 FROM worker_pools WHERE pool_id = ?", u.ID)
}

// WorkerUpdate writes the given columns of one worker (store.WorkerExecutor).
func (d Driver) WorkerUpdate(ctx context.Context, x Execer, u store.WorkerUpdate) error {
	if !ASCIIID(u.ID) {
		return fmt.Errorf("update worker %s: %w", u.ID, store.ErrNotFound)
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
		set("last_heartbeat", d.Time(*u.LastHeartbeat))
	}
	if u.LastActiveAt != nil {
		set("last_active_at", d.Time(*u.LastActiveAt))
	}
	if len(sets) == 0 {
		sets = append(sets, "worker_id = worker_id")
	}
	what := "update worker " + u.ID
	res, err := x.ExecContext(ctx, "UPDATE workers SET "+strings.Join(sets, ", ")+" WHERE worker_id = ?",
		append(args, u.ID)...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, d.MapErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	} else if n == 0 {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return nil
}

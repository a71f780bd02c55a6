package sqlgen

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// This file reads rows into the store's models. Both schemas have the same columns; only the
// encoding of times differs (Encoding.ScanTime).

// Columns of the tables read whole, in the order the scanners below read them.
const (
	JobColumns = "job_id, type, agent, payload, " + JobColumnsAfterPayload
	// JobColumnsNoPayload reads a job without its payload (up to max_payload_bytes), for the
	// passes that walk many jobs and need none.
	JobColumnsNoPayload    = "job_id, type, agent, NULL, " + JobColumnsAfterPayload
	JobColumnsAfterPayload = `status, attempts, max_attempts, available_at,
	enqueued, stream_id, owner_pool, worker_id, lease_token, gpu_memory_mb, gpus, gpu_exclusive,
	waiting_reason, priority, placed_node, constraints, pool_id, model_id, timeout_ms, result, last_error, created_at, updated_at, started_at, finished_at, lease_expires_at, callback_url, flow`
	LeaseColumns = `token, agent_name, job_id, node_id, gpu_index, gpu_indexes, mode, memory_mb,
	exclusive, ttl_ms, status, created_at, expires_at, last_heartbeat, ended_at, metadata`
	poolColumns = `pool_id, agent_name, model_id, adapter, variant, job_types, desired_workers,
	spawned_workers, status, status_reason, status_changed_at, hold_seconds, created_at, updated_at,
	started_at, last_heartbeat, last_activity_at, metadata`
	workerColumns = `worker_id, pool_id, node_id, hostname, pid, job_types, concurrency, status,
	instruction, in_flight, jobs_claimed, telemetry, registered_at, last_heartbeat, last_active_at, warm_model`
)

// Scanner is one row to read: *sql.Row or *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// Collect scans the rows of the current result set with scan; an error of the iteration is
// mapped by d. It leaves rows open: a MariaDB read of two result sets goes on with the next.
func Collect[T any](d *Driver, rows *sql.Rows, scan func(Scanner) (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, d.MapErr(err)
	}
	return out, nil
}

// query runs a read on x and scans every row with scan.
func query[T any](ctx context.Context, d *Driver, x Reader, scan func(Scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := x.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, d.MapErr(err)
	}
	defer rows.Close()
	return Collect(d, rows, scan)
}

// QueryJobs runs a SELECT of JobColumns (or JobColumnsNoPayload) on x and scans every row.
func (d *Driver) QueryJobs(ctx context.Context, x Reader, q string, args ...any) ([]store.Job, error) {
	return query(ctx, d, x, d.ScanJob, q, args...)
}

// QueryColumn runs a read of one column on x and returns its values.
func QueryColumn[T any](ctx context.Context, d *Driver, x Reader, q string, args ...any) ([]T, error) {
	return query(ctx, d, x, func(row Scanner) (T, error) {
		var v T
		err := row.Scan(&v)
		return v, err
	}, q, args...)
}

// timeDest is the Scan destination of a time column, decoded by Encoding.ScanTime: into t (the
// zero time for NULL) or into p (nil for NULL).
type timeDest struct {
	scan func(any) (time.Time, bool, error)
	t    *time.Time
	p    **time.Time
}

func (d timeDest) Scan(src any) error {
	t, ok, err := d.scan(src)
	switch {
	case err != nil:
		return err
	case d.t != nil:
		*d.t = t
	case ok:
		*d.p = &t
	default:
		*d.p = nil
	}
	return nil
}

// at reads a time column into t.
func (enc Encoding) at(t *time.Time) timeDest { return timeDest{scan: enc.ScanTime, t: t} }

// atPtr reads a nullable time column into p.
func (enc Encoding) atPtr(p **time.Time) timeDest { return timeDest{scan: enc.ScanTime, p: p} }

// ScanJob reads a row of JobColumns.
func (enc Encoding) ScanJob(row Scanner) (store.Job, error) {
	var (
		j                  store.Job
		status             string
		timeoutMS          int64
		payload, resultRaw []byte
		constraints        []byte
	)
	err := row.Scan(&j.ID, &j.Type, &j.Agent, &payload, &status, &j.Attempts, &j.MaxAttempts,
		enc.at(&j.AvailableAt), &j.Enqueued, &j.StreamID, &j.OwnerPool, &j.WorkerID, &j.LeaseToken,
		&j.GPUMemoryMB, &j.GPUs, &j.GPUExclusive, &j.WaitingReason, &j.Priority, &j.PlacedNode, &constraints, &j.PoolID, &j.ModelID, &timeoutMS, &resultRaw, &j.LastError, enc.at(&j.CreatedAt), enc.at(&j.UpdatedAt),
		enc.atPtr(&j.StartedAt), enc.atPtr(&j.FinishedAt), enc.atPtr(&j.LeaseExpiresAt), &j.CallbackURL, &j.Flow)
	if err != nil {
		return store.Job{}, err
	}
	if len(constraints) > 0 {
		j.Constraints = new(store.Constraints)
		if err := json.Unmarshal(constraints, j.Constraints); err != nil {
			return store.Job{}, fmt.Errorf("job %s: constraints: %w", j.ID, err)
		}
	}
	j.Status = store.JobStatus(status)
	j.Payload = NilIfEmpty(payload)
	j.Result = NilIfEmpty(resultRaw)
	j.Timeout = time.Duration(timeoutMS) * time.Millisecond
	return j, nil
}

// ScanLease reads a row of LeaseColumns.
func (enc Encoding) ScanLease(row Scanner) (store.Lease, error) {
	var (
		l            store.Lease
		jobID        sql.NullString
		gpu          sql.NullInt64
		more         string
		mode, status string
		ttlMS        int64
		metadata     []byte
	)
	err := row.Scan(&l.Token, &l.Agent, &jobID, &l.NodeID, &gpu, &more, &mode, &l.MemoryMB, &l.Exclusive,
		&ttlMS, &status, enc.at(&l.CreatedAt), enc.at(&l.ExpiresAt), enc.at(&l.LastHeartbeat),
		enc.atPtr(&l.EndedAt), &metadata)
	if err != nil {
		return store.Lease{}, err
	}
	l.JobID = jobID.String
	if gpu.Valid {
		i := int(gpu.Int64)
		l.GPUIndex = &i
		if l.GPUIndexes, err = GPUIndexes(i, more); err != nil {
			return store.Lease{}, fmt.Errorf("lease %s: %w", l.Token, err)
		}
	}
	l.Mode, l.Status = store.LeaseMode(mode), store.LeaseStatus(status)
	l.TTL = time.Duration(ttlMS) * time.Millisecond
	l.Metadata = NilIfEmpty(metadata)
	return l, nil
}

// scanPool reads a row of poolColumns.
func (enc Encoding) scanPool(row Scanner) (store.Pool, error) {
	var (
		p           store.Pool
		types, meta []byte
		status      string
	)
	err := row.Scan(&p.ID, &p.Agent, &p.ModelID, &p.Adapter, &p.Variant, &types, &p.DesiredWorkers,
		&p.SpawnedWorkers, &status, &p.StatusReason, enc.at(&p.StatusChangedAt), &p.HoldSeconds,
		enc.at(&p.CreatedAt), enc.at(&p.UpdatedAt), enc.at(&p.StartedAt), enc.atPtr(&p.LastHeartbeat),
		enc.atPtr(&p.LastActivityAt), &meta)
	if err != nil {
		return store.Pool{}, err
	}
	p.Status = store.PoolStatus(status)
	if p.Types, err = ParseTypes(types); err != nil {
		return store.Pool{}, fmt.Errorf("pool %s: %w", p.ID, err)
	}
	p.Metadata = NilIfEmpty(meta)
	return p, nil
}

// scanWorker reads a row of workerColumns.
func (enc Encoding) scanWorker(row Scanner) (store.Worker, error) {
	var (
		w                   store.Worker
		types, telemetry    []byte
		status, instruction string
	)
	err := row.Scan(&w.ID, &w.PoolID, &w.NodeID, &w.Hostname, &w.PID, &types, &w.Concurrency, &status,
		&instruction, &w.InFlight, &w.JobsClaimed, &telemetry, enc.at(&w.RegisteredAt),
		enc.at(&w.LastHeartbeat), enc.atPtr(&w.LastActiveAt), &w.WarmModel)
	if err != nil {
		return store.Worker{}, err
	}
	w.Status, w.Instruction = store.WorkerStatus(status), store.WorkerInstruction(instruction)
	if w.Types, err = ParseTypes(types); err != nil {
		return store.Worker{}, fmt.Errorf("worker %s: %w", w.ID, err)
	}
	w.Telemetry = NilIfEmpty(telemetry)
	return w, nil
}

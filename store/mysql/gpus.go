package mysql

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

const gpuColumns = `node_id, gpu_index, uuid, name, memory_total_mb, memory_used_mb, utilization_pct,
	temperature_c, power_watts, lost, lost_reason, source, updated_at`

// Column caps of gpu_devices, so that a device reporting a long name is stored cut rather than
// failing the whole snapshot.
const (
	gpuTextMax       = 128
	gpuLostReasonMax = 255
)

// GPUUpsertSnapshot upserts every GPU of the snapshot (INSERT … ON DUPLICATE KEY UPDATE) and
// deletes the node's rows of GPUs the snapshot does not list, in two statements.
func (e executor) GPUUpsertSnapshot(ctx context.Context, s store.GPUSnapshot) error {
	now := dbTime(s.Now)
	if len(s.GPUs) > 0 {
		var q strings.Builder
		q.WriteString("INSERT INTO gpu_devices (" + gpuColumns + ") VALUES ")
		args := make([]any, 0, 13*len(s.GPUs))
		for i, g := range s.GPUs {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			args = append(args, s.NodeID, g.Index, sqlgen.TruncateUTF8(g.UUID, gpuTextMax), sqlgen.TruncateUTF8(g.Name, gpuTextMax),
				g.MemoryTotalMB, g.MemoryUsedMB, g.UtilizationPct, g.TemperatureC, g.PowerWatts, g.Lost,
				sqlgen.TruncateUTF8(g.LostReason, gpuLostReasonMax), g.Source, now)
		}
		q.WriteString(` ON DUPLICATE KEY UPDATE uuid = VALUES(uuid), name = VALUES(name),
			memory_total_mb = VALUES(memory_total_mb), memory_used_mb = VALUES(memory_used_mb),
			utilization_pct = VALUES(utilization_pct), temperature_c = VALUES(temperature_c),
			power_watts = VALUES(power_watts), lost = VALUES(lost), lost_reason = VALUES(lost_reason),
			source = VALUES(source), updated_at = VALUES(updated_at)`)
		if _, err := e.q.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("record gpu telemetry of node %s: %w", s.NodeID, mapErr(err))
		}
	}
	q := "DELETE FROM gpu_devices WHERE node_id = ?"
	args := []any{s.NodeID}
	if len(s.GPUs) > 0 {
		q += " AND gpu_index NOT IN (" + sqlgen.Placeholders(len(s.GPUs)) + ")"
		for _, g := range s.GPUs {
			args = append(args, g.Index)
		}
	}
	if _, err := e.q.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("remove vanished gpus of node %s: %w", s.NodeID, mapErr(err))
	}
	return nil
}

// GPUList returns the GPUs of one node (every node when nodeID is empty) with their active
// reservations.
func (e executor) GPUList(ctx context.Context, nodeID string) ([]store.GPUCapacity, error) {
	gpus, err := e.gpuCapacity(ctx, nodeID, false)
	if err != nil {
		return nil, fmt.Errorf("list gpus: %w", err)
	}
	return gpus, nil
}

// GPULockNode locks the node's GPU rows (FOR UPDATE) and then sums their reservations.
func (e executor) GPULockNode(ctx context.Context, nodeID string) ([]store.GPUCapacity, error) {
	gpus, err := e.gpuCapacity(ctx, nodeID, true)
	if err != nil {
		return nil, fmt.Errorf("lock gpus of node %s: %w", nodeID, err)
	}
	return gpus, nil
}

// gpuCapacity reads the devices (locking them when lock) and then the sums of the active
// leases on them, and merges the two.
func (e executor) gpuCapacity(ctx context.Context, nodeID string, lock bool) ([]store.GPUCapacity, error) {
	q := "SELECT " + gpuColumns + " FROM gpu_devices"
	var args []any
	if nodeID != "" || lock {
		q += " WHERE node_id = ?"
		args = append(args, nodeID)
	}
	q += " ORDER BY node_id, gpu_index"
	if lock {
		q += " FOR UPDATE"
	}
	rows, err := e.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	var gpus []store.GPUCapacity
	for rows.Next() {
		var g store.GPUCapacity
		if err := rows.Scan(&g.NodeID, &g.Index, &g.UUID, &g.Name, &g.MemoryTotalMB, &g.MemoryUsedMB,
			&g.UtilizationPct, &g.TemperatureC, &g.PowerWatts, &g.Lost, &g.LostReason, &g.Source,
			&g.UpdatedAt); err != nil {
			rows.Close()
			return nil, err
		}
		gpus = append(gpus, g)
	}
	if err := rows.Close(); err != nil {
		return nil, mapErr(err)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	if len(gpus) == 0 {
		return nil, nil
	}
	type key struct {
		node  string
		index int
	}
	at := make(map[key]*store.GPUCapacity, len(gpus))
	for i := range gpus {
		at[key{gpus[i].NodeID, gpus[i].Index}] = &gpus[i]
	}
	// A consistent read: see GPULockNode for why it sees every grant committed before the lock.
	q = `SELECT node_id, gpu_index, COALESCE(SUM(memory_mb), 0), COUNT(*), MAX(exclusive)
		FROM orchestrator_leases WHERE status = ? AND gpu_index IS NOT NULL`
	args = []any{string(store.LeaseActive)}
	if nodeID != "" || lock {
		q += " AND node_id = ?"
		args = append(args, nodeID)
	}
	q += " GROUP BY node_id, gpu_index"
	sums, err := e.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer sums.Close()
	for sums.Next() {
		var (
			k         key
			reserved  int64
			n         int
			exclusive bool
		)
		if err := sums.Scan(&k.node, &k.index, &reserved, &n, &exclusive); err != nil {
			return nil, err
		}
		if g, ok := at[k]; ok {
			g.ReservedMB, g.Leases, g.Exclusive = reserved, n, exclusive
		}
	}
	if err := sums.Err(); err != nil {
		return nil, mapErr(err)
	}
	return gpus, nil
}

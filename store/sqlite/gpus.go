package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/internal/sqlgen"
)

const gpuColumns = `node_id, gpu_index, uuid, name, memory_total_mb, memory_used_mb, utilization_pct,
	temperature_c, power_watts, lost, lost_reason, source, updated_at`

// Caps of the text columns, as in the MariaDB schema, so that both drivers store the same text.
const (
	gpuTextMax       = 128
	gpuLostReasonMax = 255
)

// GPUUpsertSnapshot upserts every GPU of the snapshot (INSERT … ON CONFLICT DO UPDATE) and
// deletes the node's rows of GPUs the snapshot does not list.
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
		q.WriteString(` ON CONFLICT (node_id, gpu_index) DO UPDATE SET uuid = excluded.uuid,
			name = excluded.name, memory_total_mb = excluded.memory_total_mb,
			memory_used_mb = excluded.memory_used_mb, utilization_pct = excluded.utilization_pct,
			temperature_c = excluded.temperature_c, power_watts = excluded.power_watts,
			lost = excluded.lost, lost_reason = excluded.lost_reason, source = excluded.source,
			updated_at = excluded.updated_at`)
		if _, err := e.w.ExecContext(ctx, q.String(), args...); err != nil {
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
	if _, err := e.w.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("remove vanished gpus of node %s: %w", s.NodeID, mapErr(err))
	}
	return nil
}

// GPUList returns the GPUs of one node (every node when nodeID is empty) with their active
// reservations.
func (e executor) GPUList(ctx context.Context, nodeID string) ([]store.GPUCapacity, error) {
	gpus, err := e.gpuCapacity(ctx, e.r, nodeID, nodeID != "")
	if err != nil {
		return nil, fmt.Errorf("list gpus: %w", err)
	}
	return gpus, nil
}

// GPULockNode is GPUList of one node. Inside WithTx the transaction holds the database's write
// lock already, which serializes grants as MariaDB's FOR UPDATE does; the reads go through
// the transaction so they see its own writes.
func (e executor) GPULockNode(ctx context.Context, nodeID string) ([]store.GPUCapacity, error) {
	gpus, err := e.gpuCapacity(ctx, e.w, nodeID, true)
	if err != nil {
		return nil, fmt.Errorf("lock gpus of node %s: %w", nodeID, err)
	}
	return gpus, nil
}

// gpuCapacity reads the devices of one node (or all) and the sums of their active leases.
func (e executor) gpuCapacity(ctx context.Context, q querier, nodeID string, oneNode bool) ([]store.GPUCapacity, error) {
	query := "SELECT " + gpuColumns + " FROM gpu_devices"
	var args []any
	if oneNode {
		query += " WHERE node_id = ?"
		args = append(args, nodeID)
	}
	rows, err := q.QueryContext(ctx, query+" ORDER BY node_id, gpu_index", args...)
	if err != nil {
		return nil, mapErr(err)
	}
	var gpus []store.GPUCapacity
	for rows.Next() {
		var (
			g       store.GPUCapacity
			updated dbTimeScan
		)
		if err := rows.Scan(&g.NodeID, &g.Index, &g.UUID, &g.Name, &g.MemoryTotalMB, &g.MemoryUsedMB,
			&g.UtilizationPct, &g.TemperatureC, &g.PowerWatts, &g.Lost, &g.LostReason, &g.Source,
			&updated); err != nil {
			rows.Close()
			return nil, err
		}
		g.UpdatedAt = updated.t
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
	query = `SELECT node_id, gpu_index, COALESCE(SUM(memory_mb), 0), COUNT(*), MAX(exclusive)
		FROM orchestrator_leases WHERE status = ? AND gpu_index IS NOT NULL`
	args = []any{string(store.LeaseActive)}
	if oneNode {
		query += " AND node_id = ?"
		args = append(args, nodeID)
	}
	sums, err := q.QueryContext(ctx, query+" GROUP BY node_id, gpu_index", args...)
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

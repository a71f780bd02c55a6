package sqlgen

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpuorch/orchestrator/store"
)

// This file holds the statements of GPU devices that both dialects share (store.GPUExecutor).

const gpuColumns = `node_id, gpu_index, uuid, name, memory_total_mb, memory_used_mb, utilization_pct,
	temperature_c, power_watts, lost, lost_reason, source, updated_at`

// Column caps of gpu_devices, so that a device reporting a long name is stored cut rather than
// failing the whole snapshot.
const (
	gpuTextMax       = 128
	gpuLostReasonMax = 255
)

// gpuKeys and gpuUpdated are the key and the other columns of gpuColumns.
var (
	gpuKeys    = []string{"node_id", "gpu_index"}
	gpuUpdated = []string{"uuid", "name", "memory_total_mb", "memory_used_mb", "utilization_pct",
		"temperature_c", "power_watts", "lost", "lost_reason", "source", "updated_at"}
)

// GPUUpsertSnapshot upserts every GPU of the snapshot (Dialect.Upsert) and deletes the node's
// rows of GPUs the snapshot does not list, in two statements.
func (e Executor) GPUUpsertSnapshot(ctx context.Context, s store.GPUSnapshot) error {
	now := e.d.Time(s.Now)
	if len(s.GPUs) > 0 {
		var q strings.Builder
		q.WriteString("INSERT INTO gpu_devices (" + gpuColumns + ") VALUES ")
		args := make([]any, 0, 13*len(s.GPUs))
		for i, g := range s.GPUs {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			args = append(args, s.NodeID, g.Index, TruncateUTF8(g.UUID, gpuTextMax), TruncateUTF8(g.Name, gpuTextMax),
				g.MemoryTotalMB, g.MemoryUsedMB, g.UtilizationPct, g.TemperatureC, g.PowerWatts, g.Lost,
				TruncateUTF8(g.LostReason, gpuLostReasonMax), g.Source, now)
		}
		q.WriteString(" " + e.d.Upsert(gpuKeys, gpuUpdated))
		if _, err := e.w.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("record gpu telemetry of node %s: %w", s.NodeID, e.d.MapErr(err))
		}
	}
	q := "DELETE FROM gpu_devices WHERE node_id = ?"
	args := []any{s.NodeID}
	if len(s.GPUs) > 0 {
		q += " AND gpu_index NOT IN (" + Placeholders(len(s.GPUs)) + ")"
		for _, g := range s.GPUs {
			args = append(args, g.Index)
		}
	}
	if _, err := e.w.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("remove vanished gpus of node %s: %w", s.NodeID, e.d.MapErr(err))
	}
	return nil
}

// GPUList returns the GPUs of one node (every node when nodeID is empty) with their active
// reservations.
func (e Executor) GPUList(ctx context.Context, nodeID string) ([]store.GPUCapacity, error) {
	gpus, err := e.gpuCapacity(ctx, e.r, nodeID, nodeID != "", false)
	if err != nil {
		return nil, fmt.Errorf("list gpus: %w", err)
	}
	return gpus, nil
}

// GPULockNode locks the node's GPU rows (Dialect.ForUpdate) and then sums their reservations,
// through the connection that writes, so that a transaction sees its own grants. Where the
// dialect has no ForUpdate (SQLite) the transaction holds the database's write lock already,
// which serializes grants as the row locks do.
func (e Executor) GPULockNode(ctx context.Context, nodeID string) ([]store.GPUCapacity, error) {
	gpus, err := e.gpuCapacity(ctx, e.w, nodeID, true, true)
	if err != nil {
		return nil, fmt.Errorf("lock gpus of node %s: %w", nodeID, err)
	}
	return gpus, nil
}

// gpuCapacity reads the devices of one node (or all), locking them when lock, and then the sums
// of the active leases on them, and merges the two.
func (e Executor) gpuCapacity(ctx context.Context, x Reader, nodeID string, oneNode, lock bool) ([]store.GPUCapacity, error) {
	var f filter
	if oneNode {
		f.add("node_id = ?", nodeID)
	}
	gpus, err := query(ctx, e.d, x, e.d.scanGPU, "SELECT "+gpuColumns+" FROM gpu_devices"+f.sql()+
		" ORDER BY node_id, gpu_index"+e.d.lock(lock), f.args...)
	if err != nil || len(gpus) == 0 {
		return nil, err
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
	f = filter{where: []string{"status = ?", "gpu_index IS NOT NULL"}, args: []any{string(store.LeaseActive)}}
	if oneNode {
		f.add("node_id = ?", nodeID)
	}
	// Leases of several GPUs (gpu_indexes) form groups of their own: each group's sums count on
	// its gpu_index and on every GPU of its gpu_indexes.
	sums, err := x.QueryContext(ctx, `SELECT node_id, gpu_index, gpu_indexes, COALESCE(SUM(memory_mb), 0), COUNT(*),
		MAX(exclusive) FROM orchestrator_leases`+f.sql()+" GROUP BY node_id, gpu_index, gpu_indexes", f.args...)
	if err != nil {
		return nil, e.d.MapErr(err)
	}
	defer sums.Close()
	for sums.Next() {
		var (
			node      string
			first, n  int
			more      string
			reserved  int64
			exclusive bool
		)
		if err := sums.Scan(&node, &first, &more, &reserved, &n, &exclusive); err != nil {
			return nil, err
		}
		indexes, err := GPUIndexes(first, more)
		if err != nil {
			return nil, err
		}
		for _, i := range indexes {
			if g, ok := at[key{node, i}]; ok {
				g.ReservedMB += reserved
				g.Leases += n
				g.Exclusive = g.Exclusive || exclusive
			}
		}
	}
	if err := sums.Err(); err != nil {
		return nil, e.d.MapErr(err)
	}
	return gpus, nil
}

// scanGPU reads a row of gpuColumns.
func (enc Encoding) scanGPU(row Scanner) (store.GPUCapacity, error) {
	var g store.GPUCapacity
	err := row.Scan(&g.NodeID, &g.Index, &g.UUID, &g.Name, &g.MemoryTotalMB, &g.MemoryUsedMB,
		&g.UtilizationPct, &g.TemperatureC, &g.PowerWatts, &g.Lost, &g.LostReason, &g.Source,
		enc.at(&g.UpdatedAt))
	return g, err
}

// GPULockAll locks every node's GPU rows, in node and index order, and sums their
// reservations (GPULockNode of every node at once).
func (e Executor) GPULockAll(ctx context.Context) ([]store.GPUCapacity, error) {
	gpus, err := e.gpuCapacity(ctx, e.w, "", false, true)
	if err != nil {
		return nil, fmt.Errorf("lock every gpu: %w", err)
	}
	return gpus, nil
}

package leases

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/telemetry"
)

// RecordSnapshot writes a node's telemetry to gpu_devices: one row per usable GPU and per lost
// GPU (marked lost, so placement skips it and operators see it), and the rows of GPUs the node
// no longer reports are deleted. The rows are stamped with this orchestrator's clock, which
// freshness is judged by, so clock skew between hosts does not matter.
//
// A snapshot of a CPU-only provider (Source none) records nothing: it knows no GPU, and it must
// not erase the rows another reporter of the same node wrote (an orchestrator without GPUs on
// the host of a GPU worker, both named after the host). It is the telemetry.Sink of the
// orchestrator's own poller. The node's automatic labels (gpu.*) go to the node registry when
// they changed, and every NodeSeenInterval otherwise.
func (m *Manager) RecordSnapshot(ctx context.Context, snap telemetry.Snapshot) error {
	if snap.Source == telemetry.SourceNone || snap.NodeID == "" {
		return nil
	}
	devs := make([]store.GPUDevice, 0, len(snap.GPUs)+len(snap.Lost))
	for _, g := range snap.GPUs {
		devs = append(devs, store.GPUDevice{
			Index: g.Index, UUID: g.UUID, Name: g.Name, MemoryTotalMB: g.MemoryTotalMB,
			MemoryUsedMB: g.MemoryUsedMB, UtilizationPct: g.UtilizationPct, TemperatureC: g.TemperatureC,
			PowerWatts: g.PowerWatts, Source: snap.Source,
		})
	}
	for _, g := range snap.Lost {
		devs = append(devs, store.GPUDevice{Index: g.Index, UUID: g.UUID, Lost: true, LostReason: g.Reason,
			UtilizationPct: telemetry.Unknown, TemperatureC: telemetry.Unknown, PowerWatts: telemetry.Unknown,
			Source: snap.Source})
	}
	now := m.nowUTC()
	if err := m.store.GPUUpsertSnapshot(ctx, store.GPUSnapshot{NodeID: snap.NodeID, GPUs: devs, Now: now}); err != nil {
		return fmt.Errorf("record telemetry of node %s: %w", snap.NodeID, err)
	}
	if err := m.recordNode(ctx, snap, now); err != nil {
		return err
	}
	if m.recorded != nil && len(devs) > 0 {
		m.recorded(snap.NodeID)
	}
	return nil
}

// GPUStatus is a GPU as GET /gpus shows it: its telemetry, what leases reserve on it, what
// placement would still hand out, and how old the telemetry is.
type GPUStatus struct {
	store.GPUCapacity
	// FreeMB is FreeMB(gpu, margin), at least 0.
	FreeMB int64
	// Age is how long ago the telemetry was received.
	Age time.Duration
	// Fresh reports whether placement trusts the telemetry (Age within the freshness window).
	Fresh bool
}

// GPUs returns the GPUs of nodeID (every node when empty) with their reservations.
func (m *Manager) GPUs(ctx context.Context, nodeID string) ([]GPUStatus, error) {
	gpus, err := m.store.GPUList(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("list gpus: %w", err)
	}
	now := m.nowUTC()
	out := make([]GPUStatus, len(gpus))
	for i, g := range gpus {
		age := max(now.Sub(g.UpdatedAt), 0)
		out[i] = GPUStatus{GPUCapacity: g, FreeMB: max(FreeMB(g, m.cfg.SafetyMarginMB), 0), Age: age,
			Fresh: !g.Lost && age < m.cfg.TelemetryFreshness}
	}
	return out, nil
}

// Reserved returns the memory active leases reserve on each GPU of nodeID.
func (m *Manager) Reserved(ctx context.Context, nodeID string) (map[int]int64, error) {
	gpus, err := m.store.GPUList(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("read reservations of node %s: %w", nodeID, err)
	}
	out := make(map[int]int64, len(gpus))
	for _, g := range gpus {
		out[g.Index] = g.ReservedMB
	}
	return out, nil
}

// Follower is the telemetry provider of a node whose GPUs are simulated: before each snapshot
// it sets every simulated GPU's used memory to what the active leases on it reserve, read from
// the lease table. The simulation thus follows grants and releases made by any orchestrator
// instance, survives restarts, and never drifts (it is level-based, not a count of events).
type Follower struct {
	sim    *telemetry.Simulated
	m      *Manager
	nodeID string
	log    *slog.Logger
}

var _ telemetry.Provider = (*Follower)(nil)

// Follow wraps sim, the simulated GPUs of nodeID, so that they follow the leases of m's store.
func (m *Manager) Follow(sim *telemetry.Simulated, nodeID string) *Follower {
	return &Follower{sim: sim, m: m, nodeID: nodeID, log: m.log.With("node_id", nodeID)}
}

// Snapshot syncs the simulated usage with the reservations and returns the simulated state. A
// failure to read the reservations is logged and the last usage kept: telemetry must not stop
// because the database hiccupped.
func (f *Follower) Snapshot(ctx context.Context) (telemetry.Snapshot, error) {
	if reserved, err := f.m.Reserved(ctx, f.nodeID); err != nil {
		f.log.Warn("simulated gpus keep their last usage", "error", err)
	} else {
		FollowReserved(f.sim, reserved, f.log)
	}
	return f.sim.Snapshot(ctx)
}

// Name returns the simulated provider's name.
func (f *Follower) Name() string { return f.sim.Name() }

// Close closes the simulated provider.
func (f *Follower) Close() error { return f.sim.Close() }

// FollowReserved sets the used memory of each simulated GPU to reserved[index] (0 when absent),
// capped at the GPU's total.
func FollowReserved(sim *telemetry.Simulated, reserved map[int]int64, log *slog.Logger) {
	snap, err := sim.Snapshot(context.Background())
	if err != nil {
		return
	}
	for _, g := range snap.GPUs {
		if err := sim.SetUsed(g.Index, min(max(reserved[g.Index], 0), g.MemoryTotalMB)); err != nil {
			log.Warn("set simulated gpu usage", "gpu_index", g.Index, "error", err)
		}
	}
}

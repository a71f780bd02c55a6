package leases

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/nodelabels"
	"github.com/gpuorch/orchestrator/telemetry"
)

// NodeSeenInterval is how often a node whose automatic labels did not change has its nodes
// row written again (its last_seen moved): telemetry comes every poll interval from every
// reporter of a node, and writing the row each time would add a write to the hot path for
// nothing. A change of labels is written at once.
const NodeSeenInterval = 30 * time.Second

// nodeSeen remembers, per node, the automatic labels this instance last wrote and when, so
// that recordNode writes only what changed. It is per instance and in memory: a restarted or
// other instance writes the row once more, which the merge makes harmless.
type nodeSeen struct {
	mu    sync.Mutex
	nodes map[string]nodeWrite
}

type nodeWrite struct {
	labels map[string]string
	at     time.Time
}

// recordNode records the automatic labels of snap's node in the node registry when they
// changed or NodeSeenInterval passed since this instance last wrote them. A snapshot with no
// usable GPU writes nothing (NodeLabels).
func (m *Manager) recordNode(ctx context.Context, snap telemetry.Snapshot, now time.Time) error {
	labels := NodeLabels(snap)
	if labels == nil {
		return nil
	}
	m.seen.mu.Lock()
	last, ok := m.seen.nodes[snap.NodeID]
	m.seen.mu.Unlock()
	if ok && maps.Equal(last.labels, labels) && now.Sub(last.at) < NodeSeenInterval {
		return nil
	}
	if err := m.store.NodeUpsert(ctx, snap.NodeID, labels, now); err != nil {
		return fmt.Errorf("record node %s: %w", snap.NodeID, err)
	}
	m.seen.mu.Lock()
	defer m.seen.mu.Unlock()
	if m.seen.nodes == nil {
		m.seen.nodes = map[string]nodeWrite{}
	}
	m.seen.nodes[snap.NodeID] = nodeWrite{labels: labels, at: now}
	return nil
}

// NodeLabels returns the automatic labels (nodelabels.Key*) of a node's snapshot, or nil for a
// snapshot with no usable GPU (a CPU-only reporter, or a node whose GPUs are all lost): such a
// snapshot says nothing about the node's GPUs, and must not erase what another reporter of the
// node said. Fields the telemetry does not have are left out.
func NodeLabels(snap telemetry.Snapshot) map[string]string {
	if len(snap.GPUs) == 0 {
		return nil
	}
	largest := snap.GPUs[0]
	mig := ""
	for _, g := range snap.GPUs {
		if g.MemoryTotalMB > largest.MemoryTotalMB {
			largest = g
		}
		switch {
		case g.MIG == telemetry.MIGEnabled:
			mig = telemetry.MIGEnabled
		case g.MIG == telemetry.MIGDisabled && mig == "":
			mig = telemetry.MIGDisabled
		}
	}
	out := map[string]string{
		nodelabels.KeyCount:    strconv.Itoa(len(snap.GPUs)),
		nodelabels.KeyMemoryMB: strconv.FormatInt(largest.MemoryTotalMB, 10),
	}
	add := func(k, v string) {
		if v = nodelabels.AsValue(v); v != "" {
			out[k] = v
		}
	}
	add(nodelabels.KeyProduct, largest.Name)
	add(nodelabels.KeyDriver, snap.DriverVersion)
	add(nodelabels.KeyCUDA, snap.CUDAVersion)
	add(nodelabels.KeyMIG, mig)
	return out
}

package leases

import (
	"context"
	"fmt"
	"maps"
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
// usable GPU writes nothing (nodelabels.FromSnapshot).
func (m *Manager) recordNode(ctx context.Context, snap telemetry.Snapshot, now time.Time) error {
	labels := nodelabels.FromSnapshot(snap)
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

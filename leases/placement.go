package leases

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// FreeMB is the memory of g that placement may still hand out:
//
//	total − max(used, reserved) − margin
//
// Used is what the driver reported (every process on the GPU, ours or not); reserved is what
// active leases promised (holders that have not allocated yet count too). Taking the larger of
// the two is safe whichever lags: a job that allocated is in used, a grant not yet in use is in
// reserved. The margin covers CUDA contexts, fragmentation and telemetry lag. The result may be
// negative (an over-full GPU).
func FreeMB(g store.GPUCapacity, marginMB int64) int64 {
	return g.MemoryTotalMB - max(g.MemoryUsedMB, g.ReservedMB) - marginMB
}

// Request is what a gpu lease asks of one GPU.
type Request struct {
	// MemoryMB is the memory needed (at least 1).
	MemoryMB int64
	// Exclusive asks for a whole GPU: one with no other lease, whose grantable memory (total −
	// margin) is then reserved in full, so that nothing else fits beside it.
	Exclusive bool
}

// NodeLock is the GPUs of one node, locked for the rest of a transaction, with what is still
// free on each. Place updates the in-memory reservations, so one claim can place many jobs on
// one lock; the caller inserts the leases in the same transaction.
type NodeLock struct {
	nodeID string
	margin int64
	gpus   []store.GPUCapacity
	fresh  []bool
	// denial is set when nothing can be placed on the node at all (unknown, stale, all lost).
	denial *DenialError
}

// LockNode locks the GPU rows of nodeID in tx and reads their reservations (store.GPULockNode:
// call it before any non-locking read of tx). GPUs whose telemetry is older than the freshness
// window at now, and lost GPUs, are never chosen.
func (m *Manager) LockNode(ctx context.Context, tx store.Tx, nodeID string, now time.Time) (*NodeLock, error) {
	gpus, err := tx.GPULockNode(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("lock node %s for placement: %w", nodeID, err)
	}
	return newNodeLock(nodeID, gpus, now, m.cfg), nil
}

func newNodeLock(nodeID string, gpus []store.GPUCapacity, now time.Time, cfg Config) *NodeLock {
	n := &NodeLock{nodeID: nodeID, margin: cfg.SafetyMarginMB, gpus: gpus, fresh: make([]bool, len(gpus))}
	if len(gpus) == 0 {
		n.denial = deny(ReasonNodeUnknown, nodeID,
			"node %q has reported no GPU: no telemetry was ever recorded for it, or it has none", nodeID)
		return n
	}
	usable, fresh := 0, 0
	var newest time.Time
	for i, g := range gpus {
		if g.Lost {
			continue
		}
		usable++
		newest = maxTime(newest, g.UpdatedAt)
		if now.Sub(g.UpdatedAt) < cfg.TelemetryFreshness {
			n.fresh[i] = true
			fresh++
		}
	}
	switch {
	case usable == 0:
		n.denial = deny(ReasonNoCapacity, nodeID, "every GPU of node %q is lost", nodeID)
	case fresh == 0:
		n.denial = deny(ReasonTelemetryStale, nodeID,
			"the telemetry of node %q is %s old, over the freshness window of %s: its free memory is unknown",
			nodeID, now.Sub(newest).Round(time.Millisecond), cfg.TelemetryFreshness)
	}
	return n
}

// Place picks the GPU for r (best fit: the eligible GPU with the least free memory that still
// fits, the lowest index on a tie), records the reservation in memory, and returns the GPU and
// the memory to reserve. It returns a *DenialError when no GPU can take r now.
func (n *NodeLock) Place(r Request) (gpuIndex int, reserveMB int64, err error) {
	if n.denial != nil {
		return 0, 0, n.denial
	}
	best, bestFree := -1, int64(0)
	mostFree, mostFreeAt := int64(-1), -1
	for i, g := range n.gpus {
		if !n.fresh[i] || g.Lost || g.Exclusive || (r.Exclusive && g.Leases > 0) {
			continue
		}
		free := FreeMB(g, n.margin)
		if free > mostFree {
			mostFree, mostFreeAt = free, g.Index
		}
		if free >= r.MemoryMB && (best < 0 || free < bestFree) {
			best, bestFree = i, free
		}
	}
	if best < 0 {
		kind := "GPU"
		if r.Exclusive {
			kind = "unshared GPU"
		}
		if mostFreeAt < 0 {
			return 0, 0, deny(ReasonNoCapacity, n.nodeID, "node %q has no fresh %s to place on", n.nodeID, kind)
		}
		return 0, 0, deny(ReasonNoCapacity, n.nodeID,
			"no %s of node %q has %d MB free (after the %d MB safety margin); the most is %d MB on GPU %d",
			kind, n.nodeID, r.MemoryMB, n.margin, max(mostFree, 0), mostFreeAt)
	}
	g := &n.gpus[best]
	reserve := r.MemoryMB
	if r.Exclusive {
		reserve = max(r.MemoryMB, g.MemoryTotalMB-n.margin-g.ReservedMB)
		g.Exclusive = true
	}
	g.ReservedMB += reserve
	g.Leases++
	return g.Index, reserve, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

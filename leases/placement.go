package leases

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
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

// Request is what a gpu lease asks of the GPUs of one node.
type Request struct {
	// MemoryMB is the memory needed on each GPU (at least 1).
	MemoryMB int64
	// GPUs is how many distinct GPUs of the node are needed (0 counts as 1).
	GPUs int
	// Exclusive asks for whole GPUs: ones with no other lease, whose grantable memory (total −
	// margin) is then reserved in full, so that nothing else fits beside the lease.
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

// Place picks the GPUs for r (best fit: the eligible GPUs with the least free memory that
// still fits, the lowest index on a tie), records the reservations in memory, and returns the
// GPUs and the memory reserved on each. It returns a *DenialError when the node cannot take r
// now.
func (n *NodeLock) Place(r Request) (gpuIndexes []int, reserveMB int64, err error) {
	fits, err := n.choose(r)
	if err != nil {
		return nil, 0, err
	}
	gpuIndexes, reserveMB = n.take(r, fits)
	return gpuIndexes, reserveMB, nil
}

// choose picks the GPUs for r without taking them: their positions in n.gpus, the least free
// first; or a *DenialError.
func (n *NodeLock) choose(r Request) ([]int, error) {
	if n.denial != nil {
		return nil, n.denial
	}
	want := max(r.GPUs, 1)
	var fits []int // positions in n.gpus
	mostFree, mostFreeAt := int64(-1), -1
	for i, g := range n.gpus {
		if !n.usable(i, r) {
			continue
		}
		free := FreeMB(g, n.margin)
		if free > mostFree {
			mostFree, mostFreeAt = free, g.Index
		}
		if free >= r.MemoryMB {
			fits = append(fits, i)
		}
	}
	if len(fits) < want {
		return nil, n.deny(r, want, len(fits), mostFree, mostFreeAt)
	}
	slices.SortStableFunc(fits, func(a, b int) int { // n.gpus is in index order already
		return cmp.Compare(FreeMB(n.gpus[a], n.margin), FreeMB(n.gpus[b], n.margin))
	})
	return fits[:want], nil
}

// usable reports whether the GPU at position i may take r: fresh, not lost, not held whole,
// and without any lease when r wants it whole.
func (n *NodeLock) usable(i int, r Request) bool {
	g := n.gpus[i]
	return n.fresh[i] && !g.Lost && !g.Exclusive && (!r.Exclusive || g.Leases == 0)
}

// leftover is the free memory that placing r on the GPUs at fits would leave on them: what
// best fit makes small and spread large.
func (n *NodeLock) leftover(r Request, fits []int) int64 {
	var sum int64
	for _, i := range fits {
		sum += FreeMB(n.gpus[i], n.margin) - r.MemoryMB
	}
	return sum
}

// Reservation is the memory Place would reserve on each GPU for r now, taking nothing: r's
// own, or for an exclusive r the whole of the GPUs it would get (what an agent's quota counts).
// It returns a *DenialError when the node cannot take r now.
func (n *NodeLock) Reservation(r Request) (int64, error) {
	fits, err := n.choose(r)
	if err != nil {
		return 0, err
	}
	return n.reservation(r, fits), nil
}

// reservation is the memory r reserves on each of the GPUs at fits.
func (n *NodeLock) reservation(r Request, fits []int) int64 {
	if !r.Exclusive {
		return r.MemoryMB
	}
	// The whole of each GPU, as far as the smallest of them allows: the reservation is one
	// number per lease.
	reserve := int64(math.MaxInt64)
	for _, i := range fits {
		g := n.gpus[i]
		reserve = min(reserve, g.MemoryTotalMB-n.margin-g.ReservedMB)
	}
	return max(reserve, r.MemoryMB)
}

// take reserves r on the GPUs at fits (choose's) and returns their indexes and the memory
// reserved on each.
func (n *NodeLock) take(r Request, fits []int) (gpuIndexes []int, reserve int64) {
	reserve = n.reservation(r, fits)
	gpuIndexes = make([]int, 0, len(fits))
	for _, i := range fits {
		g := &n.gpus[i]
		g.ReservedMB += reserve
		g.Leases++
		g.Exclusive = g.Exclusive || r.Exclusive
		gpuIndexes = append(gpuIndexes, g.Index)
	}
	return gpuIndexes, reserve
}

// deny says why r does not fit: fits of the want GPUs it needs have room, and the most free
// memory on one GPU is mostFree, on GPU mostFreeAt (-1: no fresh GPU at all).
func (n *NodeLock) deny(r Request, want, fits int, mostFree int64, mostFreeAt int) *DenialError {
	kind := "GPU"
	if r.Exclusive {
		kind = "unshared GPU"
	}
	switch {
	case mostFreeAt < 0:
		return deny(ReasonNoCapacity, n.nodeID, "node %q has no fresh %s to place on", n.nodeID, kind)
	case want > 1:
		return deny(ReasonNoCapacity, n.nodeID,
			"needs %d %ss with %d MB free each (after the %d MB safety margin); node %q has %d; the most on one is %d MB on GPU %d",
			want, kind, r.MemoryMB, n.margin, n.nodeID, fits, max(mostFree, 0), mostFreeAt)
	}
	return deny(ReasonNoCapacity, n.nodeID,
		"no %s of node %q has %d MB free (after the %d MB safety margin); the most is %d MB on GPU %d",
		kind, n.nodeID, r.MemoryMB, n.margin, max(mostFree, 0), mostFreeAt)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

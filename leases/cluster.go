package leases

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// Policy is how the scheduler picks among the nodes a request fits on.
type Policy string

const (
	// PolicyBestFit places on the node whose chosen GPUs are left with the least free memory:
	// small jobs fill the holes, and whole GPUs stay free for large ones.
	PolicyBestFit Policy = "best_fit"
	// PolicySpread places on the node whose chosen GPUs are left with the most free memory:
	// jobs spread out, each with room to grow.
	PolicySpread Policy = "spread"
)

// Reasons the scheduler gives a job that no node can take now, besides the node denials.
const (
	// ReasonNoFreshTelemetry: every node the job could run on reports GPUs older than the
	// freshness window (or none at all).
	ReasonNoFreshTelemetry = "no_fresh_telemetry"
	// ReasonNoWorker: no live worker of the job's type runs on a node with GPUs.
	ReasonNoWorker = "no_worker"
	// ReasonUnsatisfiable: no node the job could run on could ever hold it, however idle.
	ReasonUnsatisfiable = "unsatisfiable"
	// ReasonReserved: the node that would take the job is held for an older blocked job.
	ReasonReserved = "reserved"
)

// Cluster is the GPUs of every node, locked for the rest of a transaction (LockCluster), with
// what is still free on each. Placing updates the in-memory reservations, so one pass can
// place many jobs; the caller inserts their leases in the same transaction.
type Cluster struct {
	nodes  map[string]*NodeLock
	order  []string // node ids, sorted: the tie-break
	margin int64
}

// LockCluster locks every node's GPU rows in tx and reads their reservations
// (store.GPULockAll: call it before any non-locking read of tx).
func (m *Manager) LockCluster(ctx context.Context, tx store.Tx, now time.Time) (*Cluster, error) {
	gpus, err := tx.GPULockAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock the cluster for placement: %w", err)
	}
	byNode := map[string][]store.GPUCapacity{}
	for _, g := range gpus {
		byNode[g.NodeID] = append(byNode[g.NodeID], g)
	}
	c := &Cluster{nodes: make(map[string]*NodeLock, len(byNode)), margin: m.cfg.SafetyMarginMB}
	for id, gs := range byNode {
		c.nodes[id] = newNodeLock(id, gs, now, m.cfg)
		c.order = append(c.order, id)
	}
	slices.Sort(c.order)
	return c, nil
}

// Node returns the lock of one node (nil when the node has reported no GPU): Manager.Prepare
// places on it.
func (c *Cluster) Node(id string) *NodeLock { return c.nodes[id] }

// Nodes returns the ids of the nodes with GPUs, sorted.
func (c *Cluster) Nodes() []string { return c.order }

// Choose picks the node among eligible that r fits on now, by policy (ties go to the first
// node id in order), without taking anything: Prepare on Node(id) then places it. When none
// fits it returns a *DenialError saying why, for the whole of eligible.
func (c *Cluster) Choose(r Request, eligible []string, policy Policy) (string, error) {
	best, bestLeft := "", int64(0)
	stale, mostFree, mostFreeOn, mostFreeAt := 0, int64(-1), "", -1
	for _, id := range c.order {
		n := c.nodes[id]
		if !slices.Contains(eligible, id) {
			continue
		}
		fits, err := n.choose(r)
		if err != nil {
			if n.denial != nil {
				stale++
				continue
			}
			// The most free on any fresh GPU, shared ones too: an exclusive request that
			// waits for its GPUs to empty has no room now, it is not short of telemetry.
			if free, at := n.mostFree(Request{MemoryMB: r.MemoryMB}); free > mostFree {
				mostFree, mostFreeOn, mostFreeAt = free, id, at
			}
			continue
		}
		left := n.leftover(r, fits)
		better := left < bestLeft
		if policy == PolicySpread {
			better = left > bestLeft
		}
		if best == "" || better {
			best, bestLeft = id, left
		}
	}
	if best != "" {
		return best, nil
	}
	want, kind := max(r.GPUs, 1), "GPU"
	if r.Exclusive {
		kind = "unshared GPU"
	}
	if mostFreeOn == "" { // every candidate node is stale or unknown, or has no usable GPU
		return "", deny(ReasonNoFreshTelemetry, "",
			"no node that runs the job's type reports fresh telemetry of a usable GPU (%d have none fresh)", stale)
	}
	return "", deny(ReasonNoCapacity, mostFreeOn, "needs %d MB on %d %s(s) of one node; the most free is %d MB on %s/%d",
		r.MemoryMB, want, kind, max(mostFree, 0), mostFreeOn, mostFreeAt)
}

// Unsatisfiable says why no node among eligible could ever place r, however idle (the GPUs of
// a node that went quiet count: it may report again); "" when one could.
func (c *Cluster) Unsatisfiable(r Request, eligible []string) string {
	nodes := map[string][]int64{}
	for _, id := range eligible {
		if n := c.nodes[id]; n != nil {
			nodes[id] = n.grantable()
		}
	}
	return unsatisfiable(nodes, r, c.margin)
}

// Hold picks the node to hold for r, a request that fits nowhere now: among eligible, the node
// that could hold r once idle and has the most memory free for it now (ties: node order). No
// job but r's is placed there until r is; "" when none could.
func (c *Cluster) Hold(r Request, eligible []string) string {
	best, bestFree := "", int64(-1)
	for _, id := range c.order {
		n := c.nodes[id]
		if !slices.Contains(eligible, id) || n.denial != nil ||
			unsatisfiable(map[string][]int64{id: n.grantable()}, r, c.margin) != "" {
			continue
		}
		if free, _ := n.mostFree(Request{MemoryMB: r.MemoryMB}); free > bestFree { // shared GPUs too
			best, bestFree = id, free
		}
	}
	return best
}

// mostFree is the most memory free on one fresh GPU of n that r could use, and its index.
func (n *NodeLock) mostFree(r Request) (int64, int) {
	most, at := int64(-1), -1
	for i, g := range n.gpus {
		if !n.usable(i, r) {
			continue
		}
		if free := FreeMB(g, n.margin); free > most {
			most, at = free, g.Index
		}
	}
	return most, at
}

// grantable is what each GPU of n could hold when idle (total − margin), lost GPUs aside,
// largest first.
func (n *NodeLock) grantable() []int64 {
	var out []int64
	for _, g := range n.gpus {
		if !g.Lost {
			out = append(out, g.MemoryTotalMB-n.margin)
		}
	}
	slices.SortFunc(out, func(a, b int64) int { return int(b - a) })
	return out
}

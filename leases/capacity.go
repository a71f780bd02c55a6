package leases

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// shapeTTL is how long the cluster's shape (Unsatisfiable) is reused before it is read again:
// nodes come and go in minutes, submits arrive many a second.
const shapeTTL = 5 * time.Second

// shape is what the cluster's GPUs could ever hold: per node, the grantable memory (total −
// safety margin) of each GPU that is not lost, largest first. Telemetry that is stale still
// counts: the GPU exists and its node may report again.
type shape struct {
	mu    sync.Mutex
	read  time.Time
	nodes map[string][]int64
}

// Unsatisfiable says why no node of the cluster (or of only, when not nil) could ever place r,
// however idle: no GPU is as large as r's memory, or no node has r's count of such GPUs. It
// returns "" when some node could, and also while no GPU is known at all (a cluster whose
// nodes have not reported yet).
func (m *Manager) Unsatisfiable(ctx context.Context, r Request, only []string) (string, error) {
	nodes, err := m.shape.get(ctx, m)
	if err != nil || len(nodes) == 0 {
		return "", err
	}
	if only != nil {
		some := make(map[string][]int64, len(only))
		for _, id := range only {
			if gpus, ok := nodes[id]; ok {
				some[id] = gpus
			}
		}
		if len(some) == 0 {
			return fmt.Sprintf("none of the %d node(s) has reported a GPU", len(only)), nil
		}
		nodes = some
	}
	return unsatisfiable(nodes, r, m.cfg.SafetyMarginMB), nil
}

// unsatisfiable says why no node of nodes (each GPU's grantable memory, largest first) could
// ever place r; "" when one could, or when nodes is empty.
func unsatisfiable(nodes map[string][]int64, r Request, marginMB int64) string {
	if len(nodes) == 0 {
		return ""
	}
	want := max(r.GPUs, 1)
	var (
		largest, mostFit     = int64(0), 0
		largestOn, mostFitOn string
	)
	for _, node := range slices.Sorted(maps.Keys(nodes)) {
		gpus := nodes[node]
		if len(gpus) > 0 && gpus[0] > largest {
			largest, largestOn = gpus[0], node
		}
		fit := 0
		for _, mb := range gpus {
			if mb >= r.MemoryMB {
				fit++
			}
		}
		if fit >= want {
			return ""
		}
		if fit > mostFit {
			mostFit, mostFitOn = fit, node
		}
	}
	if largest < r.MemoryMB {
		return fmt.Sprintf("needs %d MB on a GPU; the largest GPU of the cluster can grant %d MB (node %q, after the %d MB safety margin)",
			r.MemoryMB, largest, largestOn, marginMB)
	}
	return fmt.Sprintf("needs %d GPUs of one node with %d MB each; the most any node has is %d (node %q)",
		want, r.MemoryMB, mostFit, mostFitOn)
}

// get returns the nodes' shape, read again once shapeTTL has passed.
func (s *shape) get(ctx context.Context, m *Manager) (map[string][]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := m.now()
	if s.nodes != nil && now.Sub(s.read) < shapeTTL {
		return s.nodes, nil
	}
	gpus, err := m.store.GPUList(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("read the cluster's gpus: %w", err)
	}
	nodes := make(map[string][]int64)
	for _, g := range gpus {
		if !g.Lost {
			nodes[g.NodeID] = append(nodes[g.NodeID], g.MemoryTotalMB-m.cfg.SafetyMarginMB)
		}
	}
	for _, mbs := range nodes {
		slices.SortFunc(mbs, func(a, b int64) int { return cmp.Compare(b, a) })
	}
	s.nodes, s.read = nodes, now
	return nodes, nil
}

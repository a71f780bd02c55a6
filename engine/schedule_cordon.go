package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
)

// Cordoned nodes (docs/architecture.md, "Nodes"): the scheduler places no new job on a node an
// admin cordoned. It reads the node registry once per pass, before its transaction as it reads
// the workers, and leaves the cordoned nodes out of every job's candidates. Nothing else
// changes: a job placed there before the cordon is still claimed there, and what runs there
// runs to its end.

// ReasonCordoned starts the waiting reason of a job whose only candidate nodes (with a live
// worker of its type, or the only ones that could ever hold it) are cordoned.
const ReasonCordoned = "cordoned"

// registry reads the node registry once for a pass: the cordoned nodes, and every node's
// labels (node selectors match them).
func (e *Engine) registry(ctx context.Context) (cordoned map[string]bool, labels map[string]map[string]string, err error) {
	nodes, err := e.store.NodeList(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("schedule jobs: read the node registry: %w", err)
	}
	cordoned = map[string]bool{}
	for _, n := range nodes {
		if n.Cordoned {
			cordoned[n.ID] = true
		}
	}
	return cordoned, labelsByNode(nodes), nil
}

// splitCordoned splits the nodes of each type (workerNodes) into those the scheduler may
// place on and the cordoned ones.
func splitCordoned(byType map[string][]string, cordoned map[string]bool) (open, closed map[string][]string) {
	if len(cordoned) == 0 {
		return byType, nil
	}
	open, closed = map[string][]string{}, map[string][]string{}
	for t, nodes := range byType {
		for _, n := range nodes {
			if cordoned[n] {
				closed[t] = append(closed[t], n)
			} else {
				open[t] = append(open[t], n)
			}
		}
	}
	return open, closed
}

// waitCordoned records that j waits for a cordoned node when its only candidates are cordoned:
// it has none open (nodes), or none open could ever hold it while a cordoned one could. It
// reports whether it did; otherwise the job's reason is the usual one.
func (s *schedulePass) waitCordoned(j *store.Job, req leases.Request, nodes []string) bool {
	closed := nodesFor(s.cordoned, j.Type)
	if len(closed) == 0 {
		return false
	}
	if len(nodes) > 0 && (j.GPUMemoryMB == 0 || s.cluster.Unsatisfiable(req, nodes) == "" ||
		s.cluster.Unsatisfiable(req, closed) != "") {
		return false // an open node could run it (a job without a GPU needs none of its GPUs)
	}
	s.wait(j, fmt.Sprintf("%s: the nodes that could run it are cordoned (%s); it waits for an uncordon",
		ReasonCordoned, strings.Join(closed, ", ")))
	return true
}

// nodesFor returns the nodes of typ in byType, with those of the workers of every type ("*"),
// sorted and distinct.
func nodesFor(byType map[string][]string, typ string) []string {
	nodes := byType[typ]
	if all := byType["*"]; len(all) > 0 {
		nodes = slices.Concat(nodes, all)
		slices.Sort(nodes)
		nodes = slices.Compact(nodes)
	}
	return nodes
}

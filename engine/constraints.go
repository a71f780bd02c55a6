package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/nodelabels"
	"github.com/gpuorch/orchestrator/store"
)

// Limits of a job's constraints.
const (
	// MaxSelectorLabels bounds a node selector's labels.
	MaxSelectorLabels = 16
	// MaxConstraintNodes bounds allow_nodes and deny_nodes each.
	MaxConstraintNodes = 64
	// MaxPerNodeLimit bounds max_per_node.
	MaxPerNodeLimit = 1000
)

// nodeLabelsTTL is how long submit reuses the registered nodes' labels.
const nodeLabelsTTL = 5 * time.Second

// checkConstraints validates c (nil: none) and returns them normalised: lists sorted without
// duplicates, nil when they constrain nothing.
func checkConstraints(c *store.Constraints) (*store.Constraints, error) {
	if c.Empty() {
		return nil, nil
	}
	out := &store.Constraints{MaxPerNode: c.MaxPerNode}
	if len(c.NodeSelector) > MaxSelectorLabels {
		return nil, invalid("constraints.node_selector", "has %d labels, over the limit of %d", len(c.NodeSelector), MaxSelectorLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(c.NodeSelector)) {
		v := c.NodeSelector[k]
		switch {
		case !nodelabels.Key.MatchString(k):
			return nil, invalid("constraints.node_selector", "key %.70q must be %s", k, nodelabels.Key.Rule())
		case !nodelabels.Value.MatchString(v):
			return nil, invalid("constraints.node_selector."+k, "must be %s", nodelabels.Value.Rule())
		}
		if out.NodeSelector == nil {
			out.NodeSelector = map[string]string{}
		}
		out.NodeSelector[k] = v
	}
	var err error
	if out.AllowNodes, err = nodeList("constraints.allow_nodes", c.AllowNodes); err != nil {
		return nil, err
	}
	if out.DenyNodes, err = nodeList("constraints.deny_nodes", c.DenyNodes); err != nil {
		return nil, err
	}
	for _, n := range out.DenyNodes {
		if slices.Contains(out.AllowNodes, n) {
			return nil, invalid("constraints.deny_nodes", "node %q is in allow_nodes too", n)
		}
	}
	if c.MaxPerNode < 0 || c.MaxPerNode > MaxPerNodeLimit {
		return nil, invalid("constraints.max_per_node", "must be in 1..%d (absent or 0: no limit)", MaxPerNodeLimit)
	}
	return out, nil
}

// nodeList checks one of the constraints' node lists and returns it sorted, without duplicates.
func nodeList(field string, nodes []string) ([]string, error) {
	if len(nodes) > MaxConstraintNodes {
		return nil, invalid(field, "has %d nodes, over the limit of %d", len(nodes), MaxConstraintNodes)
	}
	for i, n := range nodes {
		if !ident.ID.MatchString(n) {
			return nil, invalid(fmt.Sprintf("%s[%d]", field, i), "must be %s", ident.ID.Rule())
		}
	}
	if len(nodes) == 0 {
		return nil, nil
	}
	out := slices.Sorted(slices.Values(nodes))
	return slices.Compact(out), nil
}

// checkPlaceable refuses a job that no registered node could ever take: none passes its
// constraints, or none of those that do could hold its GPUs however idle. Any job passes
// while no node has registered (or reported a GPU) yet.
func (e *Engine) checkPlaceable(ctx context.Context, r *Resources, c *store.Constraints) error {
	gpu := r != nil && r.GPUMemoryMB > 0
	var req leases.Request
	if gpu {
		req = leases.Request{MemoryMB: int64(r.GPUMemoryMB), GPUs: r.GPUs, Exclusive: r.Exclusive}
	}
	if c.Empty() {
		if !gpu {
			return nil
		}
		return e.unsatisfiable(ctx, "resources", req, nil)
	}
	labels, err := e.nodeLabels.get(e.nowUTC(), nodeLabelsTTL, false, func() (map[string]map[string]string, error) {
		nodes, err := e.store.NodeList(ctx)
		return labelsByNode(nodes), err
	})
	if err != nil {
		return fmt.Errorf("check constraints: read the nodes' labels: %w", err)
	}
	if len(labels) == 0 {
		return nil
	}
	var matching []string
	var refused []string
	for _, id := range slices.Sorted(maps.Keys(labels)) {
		if ok, rule := c.Matches(id, labels[id]); ok {
			matching = append(matching, id)
		} else if len(refused) < 5 {
			refused = append(refused, fmt.Sprintf("%s (%s)", id, rule))
		}
	}
	if len(matching) == 0 {
		more := ""
		if n := len(labels) - len(refused); n > 0 {
			more = fmt.Sprintf(" and %d more", n)
		}
		return &UnsatisfiableError{Field: "constraints", Message: fmt.Sprintf(
			"no registered node passes them: %s%s refused (GET /nodes shows the nodes and their labels)",
			strings.Join(refused, ", "), more)}
	}
	if !gpu {
		return nil
	}
	return e.unsatisfiable(ctx, "resources", req, matching)
}

// unsatisfiable refuses req when no node of on (nil: any) could ever hold it.
func (e *Engine) unsatisfiable(ctx context.Context, field string, req leases.Request, on []string) error {
	why, err := e.leases.Unsatisfiable(ctx, req, on)
	if err != nil {
		return fmt.Errorf("check resources: %w", err)
	}
	if why != "" {
		if on != nil {
			why += fmt.Sprintf(" among the %d node(s) that pass the constraints", len(on))
		}
		return &UnsatisfiableError{Field: field, Message: why}
	}
	return nil
}

package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/gpuorch/orchestrator/internal/ident"
	"github.com/gpuorch/orchestrator/store"
)

// A fan-out runs one job once on each node of a group (docs/architecture.md, "Workflows,
// fan-out and approvals"): a parent that never runs (store.FlowFanOut, waiting) and one child
// per node, pinned there through the constraints the scheduler already enforces
// (allow_nodes: [node]), all written in the submit's transaction. The parent waits for its
// children as a dependent waits for its parents (job_deps rows labelled with the node), and
// the resolver ends it (fanout_settle.go).

// MaxFanOutNodes bounds the nodes of one fan-out.
const MaxFanOutNodes = 256

// FanOut asks for a job to run once on each node of a group: exactly one of NodeSelector,
// Nodes and All says which.
type FanOut struct {
	// NodeSelector: the ready nodes with these labels.
	NodeSelector map[string]string
	// Nodes: these nodes (registered and not cordoned; they need not be ready).
	Nodes []string
	// All: every ready node.
	All bool
	// Strategy is StrategyFailFast ("" too) or StrategyContinue.
	Strategy string
}

// fanOutSpec is a checked fan-out: its nodes, sorted, and its strategy.
type fanOutSpec struct {
	nodes    []string
	strategy string
}

// checkFanOut checks p's fan-out and finds its nodes in the node registry: the nodes it names
// (registered, not cordoned), or the ready ones (not cordoned, with a live worker of p's type)
// that its selector, or all, picks, and that p's own constraints let through. None is a 422
// unsatisfiable.
func (e *Engine) checkFanOut(ctx context.Context, p *SubmitParams) (*fanOutSpec, error) {
	f := p.FanOut
	given := 0
	for _, set := range []bool{len(f.NodeSelector) > 0, len(f.Nodes) > 0, f.All} {
		if set {
			given++
		}
	}
	switch {
	case given != 1:
		return nil, invalid("fan_out", "give exactly one of node_selector, nodes and all")
	case f.Strategy != "" && f.Strategy != StrategyFailFast && f.Strategy != StrategyContinue:
		return nil, invalid("fan_out.strategy", "must be %s or %s", StrategyFailFast, StrategyContinue)
	case e.cfg.Scheduler.Disabled:
		return nil, invalid("fan_out", "needs the scheduler, which this cluster runs without (scheduler.disabled): "+
			"it pins each child to its node")
	case len(f.Nodes) > MaxFanOutNodes:
		return nil, invalid("fan_out.nodes", "has %d nodes, over the limit of %d", len(f.Nodes), MaxFanOutNodes)
	}
	if _, err := checkConstraints(&store.Constraints{NodeSelector: f.NodeSelector}); err != nil {
		return nil, prefixed("fan_out", err)
	}
	for i, n := range f.Nodes {
		switch {
		case !ident.ID.MatchString(n):
			return nil, invalid(fmt.Sprintf("fan_out.nodes[%d]", i), "must be %s", ident.ID.Rule())
		case slices.Contains(f.Nodes[:i], n):
			return nil, invalid(fmt.Sprintf("fan_out.nodes[%d]", i), "node %q is listed twice", n)
		}
	}
	registry, err := e.store.NodeList(ctx)
	if err != nil {
		return nil, fmt.Errorf("fan out: read the node registry: %w", err)
	}
	byID := make(map[string]store.Node, len(registry))
	for _, n := range registry {
		byID[n.ID] = n
	}
	spec := &fanOutSpec{strategy: StrategyFailFast}
	if f.Strategy != "" {
		spec.strategy = f.Strategy
	}
	if len(f.Nodes) > 0 {
		for i, id := range f.Nodes {
			n, ok := byID[id]
			switch {
			case !ok:
				return nil, &UnsatisfiableError{Field: fmt.Sprintf("fan_out.nodes[%d]", i), Message: fmt.Sprintf(
					"no node %q is registered (GET /nodes lists them)", id)}
			case n.Cordoned:
				return nil, &UnsatisfiableError{Field: fmt.Sprintf("fan_out.nodes[%d]", i), Message: fmt.Sprintf(
					"node %q is cordoned", id)}
			}
		}
		spec.nodes = slices.Sorted(slices.Values(f.Nodes))
	} else if spec.nodes, err = e.readyNodes(ctx, p, byID); err != nil {
		return nil, err
	} else if len(spec.nodes) > MaxFanOutNodes {
		return nil, &UnsatisfiableError{Field: "fan_out", Message: fmt.Sprintf(
			"%d nodes match, over the limit of %d a fan-out: narrow its node_selector", len(spec.nodes), MaxFanOutNodes)}
	}
	for _, n := range spec.nodes {
		if child := p.JobID + "." + n; !JobIDPattern.MatchString(child) {
			return nil, invalid("fan_out", "the child job id %q is over %d characters: give the job a shorter job_id", child, JobIDPattern.Max)
		}
	}
	return spec, nil
}

// readyNodes are the nodes a selector fan-out (or all) runs on: registered, not cordoned,
// with a live worker of p's type, passing the selector and p's own constraints.
func (e *Engine) readyNodes(ctx context.Context, p *SubmitParams, byID map[string]store.Node) ([]string, error) {
	byType, _, err := e.workerNodes(ctx)
	if err != nil {
		return nil, err
	}
	selector := &store.Constraints{NodeSelector: p.FanOut.NodeSelector}
	var out []string
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		n := byID[id]
		if n.Cordoned || !slices.Contains(byType[p.Type], id) && !slices.Contains(byType["*"], id) {
			continue
		}
		if ok, _ := selector.Matches(id, n.Labels); !ok {
			continue
		}
		if ok, _ := p.Constraints.Matches(id, n.Labels); !ok {
			continue
		}
		out = append(out, id)
	}
	if len(out) == 0 {
		what := "every ready node"
		if len(p.FanOut.NodeSelector) > 0 {
			what = "node_selector"
		}
		return nil, &UnsatisfiableError{Field: "fan_out", Message: fmt.Sprintf("no ready node (registered, not cordoned, with a "+
			"live worker of type %s) matches %s among the %d registered (GET /nodes lists them)", p.Type, what, len(byID))}
	}
	return out, nil
}

// parentRef is a job a job of a plan waits for, with the label of the dependency row.
type parentRef struct{ id, label string }

// planJob adds fj to the plan, waiting for parents (tolerant: on_parent_failure run), with
// what its flow brings: a fan-out's children (each waiting for parents in its place, the
// parent waiting for them), an approval's hold (on a fan-out, the children are held with
// their parent and released by its approval).
func (e *Engine) planJob(ctx context.Context, pl *flowPlan, fj *flowJob, parents []parentRef, tolerant bool) error {
	f := fj.r.flow
	wait := func(j *flowJob) {
		if len(parents) == 0 {
			return
		}
		j.status, j.flow = store.JobWaiting, j.flow|store.FlowHasParents
		if tolerant {
			j.flow |= store.FlowTolerant
		}
		for _, p := range parents {
			pl.deps = append(pl.deps, store.JobDep{JobID: j.r.p.JobID, ParentID: p.id, Label: p.label})
		}
	}
	pl.jobs = append(pl.jobs, fj)
	if f == nil || f.fanOut == nil {
		wait(fj)
		if f != nil && f.approval != nil {
			holdForApproval(pl, fj, f.approval)
		}
		return nil
	}
	fo := f.fanOut
	fj.status, fj.flow = store.JobWaiting, fj.flow|store.FlowFanOut|store.FlowHasParents
	if fo.strategy == StrategyContinue {
		fj.flow |= store.FlowTolerant
	}
	fj.details["fan_out"] = map[string]any{"nodes": fo.nodes, "strategy": fo.strategy}
	var children []*flowJob
	for _, node := range fo.nodes {
		cp := fj.r.p
		cp.JobID = fj.r.p.JobID + "." + node
		cp.Constraints = &store.Constraints{AllowNodes: []string{node}}
		cp.FanOut, cp.DependsOn, cp.OnParentFailure = nil, nil, ""
		if err := e.checkPlaceable(ctx, cp.Resources, cp.Constraints); err != nil {
			return prefixed("fan_out", err)
		}
		child := &flowJob{r: newSubmitReq(fj.r.ctx, cp, fj.r.jt), status: store.JobPending,
			details: map[string]any{"fan_out_parent": fj.r.p.JobID, "node": node}}
		wait(child)
		pl.deps = append(pl.deps, store.JobDep{JobID: fj.r.p.JobID, ParentID: cp.JobID, Label: node})
		children = append(children, child)
	}
	pl.jobs = append(pl.jobs, children...)
	if f.approval != nil {
		holdForApproval(pl, fj, f.approval)
		for _, c := range children {
			c.status = store.JobAwaitingApproval // released by the parent's approval
			c.details["held_by"] = fj.r.p.JobID
		}
	}
	return nil
}
